"""The example user job (examples/sessions, written only against the public API) on the real broker
and Spark: per-user sessions closed by event-time timers, rescaled online 2 → 5 → 2, equal to the
single-process oracle; a late click is kept in the late table with its reason, a malformed one is
dead-lettered."""

from __future__ import annotations

import json
import random

import pytest

from tests.integration.streams import dead_letters, produce, rescale_while_producing, wait_for_checkpoint

pytestmark = pytest.mark.integration

JOB = "examples.sessions.job:sessions_job"
T0 = 1_760_000_000_000


def _clicks(rng: random.Random, start_ms: int, n: int) -> list[tuple[str, str, int]]:
    """`n` clicks in event-time order from `start_ms`: 20 users, 6 pages, 0-3 s apart (a user clicks
    about every 30 s, so the 30 s gap both splits and extends sessions)."""
    clicks, t = [], start_ms
    for _ in range(n):
        t += rng.randint(0, 3000)
        clicks.append((f"u{rng.randrange(20)}", f"p{rng.randrange(6)}", t))
    return clicks


def _as_records(clicks: list[tuple[str, str, int]]) -> list[str]:
    return [json.dumps({"user_id": u, "page": p, "event_time": t}) for u, p, t in clicks]


def test_sessions_example_rescaled_online_equals_the_oracle(spark, bootstrap, topic_factory, tmp_path):
    from examples.sessions.job import ALLOWED_LATENESS_MS, GAP_MS, NOT_A_CLICK, page_summary
    from examples.sessions.oracle import page_summary as oracle_page_summary
    from examples.sessions.oracle import sessions_oracle
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec

    # One Kafka partition: clicks arrive in event-time order, so none is late but the one sent late.
    topic = topic_factory("clicks", partitions=1)
    spec = StreamSpec(
        name="sessions",
        job=JOB,
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(tmp_path / "sessions"),
        channels=2,
        trigger_seconds=0.5,
    )
    rng = random.Random(7)
    rounds = [_clicks(rng, T0 + r * 1_000_000, 400) for r in range(3)]
    produce(bootstrap, topic, _as_records(rounds[0]) + ["{not a click"])
    stream = ElasticStream(spark, spec)
    stream.start()
    try:
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
        for clicks, channels in zip(rounds[1:], (5, 2)):
            rescale_while_producing(stream, channels, bootstrap, _as_records(clicks))
            wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
        # A click far ahead moves the watermark past every session's end; the next batch fires
        # their timers and rejects a click from the first round, now late.
        flush_ms = rounds[-1][-1][2] + 600_000
        produce(bootstrap, topic, _as_records([("flush", "none", flush_ms)]))
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
        produce(bootstrap, topic, _as_records([rounds[0][0]]))
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
    finally:
        stream.stop()

    every_click = [c for clicks in rounds for c in clicks] + [("flush", "none", flush_ms)]
    expected = sessions_oracle([(-1, every_click)], GAP_MS, flush_ms - ALLOWED_LATENESS_MS)
    results = spark.read.parquet(spec.results_table)
    columns = ["user_id", "landing_page", "session_start_ms", "session_end_ms", "clicks"]
    emitted = sorted(tuple(r) for r in results.select(*columns).collect())
    assert emitted == expected  # every session once: none lost, none doubled
    assert len(expected) > 100
    summary = {r.landing_page: (r.sessions, r.mean_duration_ms) for r in page_summary(results).collect()}
    oracle_summary = oracle_page_summary(expected)
    assert {page: n for page, (n, _) in summary.items()} == {page: n for page, (n, _) in oracle_summary.items()}
    for page, (_, mean_ms) in oracle_summary.items():
        assert summary[page][1] == pytest.approx(mean_ms)

    late = spark.read.parquet(spec.late_table).collect()
    assert [(r.reason.startswith("late event"), json.loads(r.row)["event_time"]) for r in late] == [
        (True, rounds[0][0][2])
    ]
    assert list(dead_letters(bootstrap, spec.dead_letter_topic).values()) == [NOT_A_CLICK]
    assert stream.last_metrics is not None and stream.last_metrics.channels == 2
