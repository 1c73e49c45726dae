"""An endurance run's judgement can fail: trends after the first retention cycle, a gap in a
tailed topic (records deleted by retention before the soak read them)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from benchmarks.soak_resources import ENDURANCE_FIGURES, ResourceSample, endurance_figures, trend
from benchmarks.soak_topics import TopicTail


def _run(
    minutes: int = 60, grow: str | None = None, warm_up_bytes: int = 0, mib_per_minute: int = 1
) -> list[ResourceSample]:
    """A sample every 2 s; stream_bytes fills up during the first 10 minutes (the first retention
    cycle) by `warm_up_bytes`, then stays; `grow` grows by `mib_per_minute` all along."""
    base = ResourceSample(0.0, 200, 80, 1 << 20, 1 << 20, 10_000, 5_000, 50 << 20, 3_000, 64 << 20, 8 << 20)
    samples = []
    for i in range(minutes * 30):
        at = i * 2.0
        sample = replace(base, at_s=at, stream_bytes=base.stream_bytes + int(min(at, 600) / 600 * warm_up_bytes))
        if grow is not None:
            sample = replace(sample, **{grow: getattr(sample, grow) + int(at / 60) * mib_per_minute * (1 << 20)})
        samples.append(sample)
    return samples


def test_a_folder_that_fills_during_the_first_cycle_then_stays_is_flat():
    trends, growing = endurance_figures(_run(warm_up_bytes=400 << 20), settle_s=1200)
    assert growing == []
    assert {t.name for t in trends} == set(ENDURANCE_FIGURES)
    stream = next(t for t in trends if t.name == "stream_bytes")
    assert stream.start == stream.end and abs(stream.per_hour) < 1


def test_a_sawtooth_of_segment_deletions_is_flat():
    samples = [replace(s, broker_log_bytes=(64 << 20) + int(s.at_s % 300) * (1 << 17)) for s in _run()]
    assert endurance_figures(samples, settle_s=1200)[1] == []


def test_a_broker_log_that_keeps_growing_is_reported():
    trends, growing = endurance_figures(_run(grow="broker_log_bytes"), settle_s=1200)
    assert [g.split()[0] for g in growing] == ["broker_log_bytes"]
    broker = next(t for t in trends if t.name == "broker_log_bytes")
    assert 55 << 20 < broker.per_hour < 65 << 20  # 1 MiB a minute


def test_memory_growing_after_the_cycle_is_reported():
    _, growing = endurance_figures(_run(grow="driver_rss", mib_per_minute=5), settle_s=1200)
    assert any(g.startswith("driver_rss kept growing") for g in growing)


def test_a_run_too_short_for_its_retention_says_so():
    _, growing = endurance_figures(_run(minutes=5), settle_s=1200)
    assert growing and "too short" in growing[0]
    _, growing = endurance_figures(_run(minutes=25), settle_s=1200)
    assert growing and "too short" in growing[0]


def test_trend_levels_are_medians_of_the_edges():
    samples = _run(minutes=20, grow="threads")
    found = trend(samples, "threads", edge_s=60)
    assert found.start < 5 << 20 and found.end > 18 << 20


def _record(partition: int, offset: int) -> SimpleNamespace:
    return SimpleNamespace(partition=partition, offset=offset, key=None, value=b"w")


def test_a_tail_counts_records_deleted_before_it_read_them_and_skips_refetches():
    taken: list[tuple[int, int]] = []
    tail = TopicTail("127.0.0.1:1", "words", lambda r: taken.append((r.partition, r.offset)))
    for partition, offset in [(0, 0), (0, 1), (1, 5), (0, 1), (0, 4), (1, 6)]:
        tail._take(_record(partition, offset))
    assert taken == [(0, 0), (0, 1), (1, 5), (0, 4), (1, 6)]
    assert tail.skipped == 5 + 2  # partition 1 began at 5; partition 0 jumped from 2 to 4
    assert tail.caught_up_with({0: 5, 1: 7}) and not tail.caught_up_with({0: 6, 1: 7})
