"""Pacing of `esp load` with a fake clock and an in-memory sink: rate kept, slow sinks, stops."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pipelines.load import LoadSpec, RecordSource, rate_profile
from pipelines.load.pacing import PacingClock, Progress, run_paced, run_unpaced
from pipelines.load.records import Batch


@dataclass
class FakeTime:
    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def clock(self) -> PacingClock:
        return PacingClock(monotonic=lambda: self.now, sleep=self.sleep, wall_ms=lambda: int(self.now * 1000))

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass
class ListSink:
    """Keeps batches; each send can cost fake time (a slow producer)."""

    time: FakeTime
    cost_per_record_s: float = 0.0
    sent: list[tuple[float, int]] = field(default_factory=list)
    flushed: int = 0

    def send(self, batch: Batch) -> None:
        self.sent.append((self.time.now, len(batch)))
        self.time.now += self.cost_per_record_s * len(batch)

    def flush(self) -> None:
        self.flushed += 1


def paced(spec: LoadSpec, cost: float = 0.0, **kwargs):
    time = FakeTime()
    sink = ListSink(time, cost)
    result = run_paced(
        rate_profile(spec), RecordSource(spec), sink, clock=time.clock(), slice_s=spec.slice_ms / 1000, **kwargs
    )
    return result, sink, time


def test_constant_rate_is_kept_second_by_second():
    spec = LoadSpec(peak_rate=2000, duration_s=5, block_records=100)
    result, sink, time = paced(spec)
    assert result.sent == 10_000 == result.target
    assert result.dropped == 0 and not result.stopped_early
    assert sum(n for _, n in sink.sent) == 10_000
    assert sum(result.per_second_sent) == 10_000
    assert all(abs(n - 2000) <= 100 for n in result.per_second_sent)  # within one 50 ms slice
    assert sink.flushed == 1
    assert time.now == pytest.approx(5.0)  # stops by itself at the end of the duration
    assert max(time.sleeps) <= 0.05 + 1e-9


def test_batches_are_one_slice_of_the_rate():
    spec = LoadSpec(peak_rate=1000, duration_s=2, slice_ms=100)
    _, sink, _ = paced(spec)
    sizes = [n for t, n in sink.sent if t > 0]
    assert sizes and all(abs(n - 100) <= 1 for n in sizes)


def test_esault_profile_is_followed():
    spec = LoadSpec(profile="esault", peak_rate=3000, speed=10, block_records=500)
    profile = rate_profile(spec)
    result, _, _ = paced(spec)
    targets = profile.per_second_targets()
    assert result.sent == profile.total_records
    assert len(result.per_second_sent) == len(targets)
    for sent, target in zip(result.per_second_sent, targets):
        assert abs(sent - target) <= 0.05 * 3000 + 1  # off by at most one slice at a step


def test_a_slow_producer_reports_less_than_the_target_and_drops_old_debt():
    spec = LoadSpec(peak_rate=10_000, duration_s=4, max_backlog_s=0.5)
    result, _, time = paced(spec, cost=1 / 4000)  # the sink takes 4000 records/s at most
    assert result.target == 40_000
    assert result.sent < 0.5 * result.target
    assert result.dropped > 0
    assert result.sent + result.dropped == result.target
    # A send is counted in the second it starts, so a second may hold one extra burst (2 slices).
    assert max(result.per_second_sent) <= 4000 + 1000
    assert result.per_second_sent[1:3] == pytest.approx([4000, 4000], abs=50)
    assert time.now < 4.0 + 0.6  # still ends near the duration


def test_a_briefly_stalled_producer_catches_up():
    spec = LoadSpec(peak_rate=1000, duration_s=3, max_backlog_s=1.0)
    time = FakeTime()
    sink = ListSink(time)
    stalled = {"done": False}

    def stall_once(progress: Progress) -> None:
        if progress.elapsed_s >= 1.0 and not stalled["done"]:
            stalled["done"] = True
            time.now += 0.5  # a GC pause or a slow broker round trip

    result = run_paced(rate_profile(spec), RecordSource(spec), sink, clock=time.clock(), on_progress=stall_once)
    assert stalled["done"]
    assert result.sent == 3000 and result.dropped == 0


def test_stop_request_ends_early_and_flushes():
    spec = LoadSpec(peak_rate=1000, duration_s=10)
    time = FakeTime()
    sink = ListSink(time)
    result = run_paced(
        rate_profile(spec), RecordSource(spec), sink, clock=time.clock(), should_stop=lambda: time.now >= 2.0
    )
    assert result.stopped_early
    assert sink.flushed == 1
    assert 1900 <= result.sent <= 2100
    assert time.now < 2.1


def test_unpaced_sends_exactly_the_limit():
    spec = LoadSpec(block_records=300)
    time = FakeTime()
    sink = ListSink(time, 1e-6)
    progress: list[Progress] = []
    result = run_unpaced(
        RecordSource(spec, limit=2500), sink, chunk=400, clock=time.clock(), on_progress=progress.append
    )
    assert result.sent == 2500 == sum(n for _, n in sink.sent)
    assert sink.flushed == 1 and progress[-1].sent == 2500
