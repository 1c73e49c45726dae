"""The sessionization example's operator (`examples.sessions.operator.Sessionize`) through the
in-process elastic stage (`elasticity.operators.Harness`): a hand-made run with exact sessions
(gap split, out-of-order clicks, tie on the landing page, the gap boundary, timer closing, a
late click rejected), a replayed batch giving the same outputs, and a property test under random
batches, watermarks, rescales, replays and partial crashes against the single-process oracle."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elasticity.operators import TIMER_PREFIX, Batch, BatchResult, Harness
from examples.sessions.operator import Sessionize
from examples.sessions.oracle import ClosedSession, Event, late_events, page_summary, sessions_oracle
from tests.unit.operators.drive import Step, drive, scratch_dir, steps

INPUT_SCHEMA = pa.schema([("user_id", pa.string()), ("page", pa.string()), ("event_time", pa.int64())])
FLUSH = 10**12
"""A watermark past every session: closes whatever is still open."""


def clicks(events: Sequence[Event], watermark_ms: int = 0) -> Batch:
    table = pa.table(
        {
            "user_id": [u for u, _, _ in events],
            "page": [p for _, p, _ in events],
            "event_time": [t for _, _, t in events],
        },
        schema=INPUT_SCHEMA,
    )
    return Batch(table, watermark_ms=watermark_ms)


def sessions(*results: BatchResult) -> list[ClosedSession]:
    return sorted(
        (r["user_id"], r["landing_page"], r["session_start_ms"], r["session_end_ms"], r["clicks"])
        for result in results
        for r in result.output.to_pylist()
    )


def rejected(*results: BatchResult) -> list[tuple[str, str, int, str]]:
    return sorted(
        (r["user_id"], r["page"], r["event_time"], r["reason"])
        for result in results
        for r in result.rejected.to_pylist()
    )


def pending_timers(harness: Harness) -> dict[str, list[int]]:
    """user -> the times of their pending event-time timers, read from the channels' stores."""
    entries = harness.entries().to_pylist()
    timers = {
        e["key"][len(TIMER_PREFIX) :]: json.loads(e["value"]) for e in entries if e["key"].startswith(TIMER_PREFIX)
    }
    return {user: sorted(t for d, t in pending if d == "event") for user, pending in sorted(timers.items())}


def oracle_input(harness: Harness) -> list[tuple[int, list[Event]]]:
    return [
        (b.watermark_ms, [(r["user_id"], r["page"], r["event_time"]) for r in b.rows.to_pylist()])
        for b in harness.batches
    ]


# The hand-made run, gap 30 s. Batch 1 (watermark 0): ann's clicks out of order, split by a 40 s
# gap, her second session starting with two clicks at the same time (landing page: the smaller).
HAND_BATCHES = [
    clicks(
        [
            ("ann", "/cart", 20_000),
            ("bob", "/blog", 5_000),
            ("ann", "/home", 1_000),
            ("ann", "/pay", 60_000),
            ("ann", "/about", 60_000),
        ]
    ),
    # Watermark 50_001 passes bob's session (5_000 + 30_000) and ann's first (20_000 + 30_000);
    # bob's click at 30_000 would have extended his session but is below the watermark: late.
    # ann's click exactly 30 s after her last one still extends her second session.
    clicks([("bob", "/x", 30_000), ("ann", "/help", 90_000)], watermark_ms=50_001),
    # Exactly the gap again, at exactly the watermark: on time, extends (nothing closes at 120_000).
    clicks([("ann", "/faq", 120_000)], watermark_ms=120_000),
    clicks([], watermark_ms=150_000),  # 120_000 + gap: a click here would still extend it
    clicks([], watermark_ms=150_001),  # passed: ann's second session closes
]


def test_hand_made_sessions_gap_split_timer_close_and_late_click(tmp_path: Path) -> None:
    harness = Harness(Sessionize(gap_ms=30_000), tmp_path, channels=2)
    results, timers = [], []
    for batch in HAND_BATCHES:
        results.append(harness.run(batch))
        timers.append(pending_timers(harness))

    assert [sessions(r) for r in results] == [
        [],
        [("ann", "/home", 1_000, 20_000, 2), ("bob", "/blog", 5_000, 5_000, 1)],
        [],
        [],
        [("ann", "/about", 60_000, 120_000, 4)],
    ]
    # One timer per open session, at its last click + gap + 1; an extended session's old one is gone.
    assert timers == [
        {"ann": [50_001, 90_001], "bob": [35_001]},
        {"ann": [120_001]},
        {"ann": [150_001]},
        {"ann": [150_001]},
        {},
    ]
    assert rejected(*results) == [("bob", "/x", 30_000, "late event: event_time below the watermark 50001")]
    assert harness.entries().num_rows == 0  # every session emitted: no state, no timer left

    closed = sessions(*results)
    assert closed == sessions_oracle(oracle_input(harness), 30_000, 150_001)
    assert late_events(oracle_input(harness)) == [("bob", "/x", 30_000)]
    assert page_summary(closed) == {"/about": (1, 60_000.0), "/blog": (1, 0.0), "/home": (1, 19_000.0)}
    harness.close()


def test_open_sessions_are_not_emitted_before_the_watermark_passes_them(tmp_path: Path) -> None:
    harness = Harness(Sessionize(gap_ms=30_000), tmp_path, channels=2)
    harness.run(HAND_BATCHES[0])
    assert sessions_oracle(oracle_input(harness), 30_000, 0) == []
    still_open = {k for k in harness.entries()["key"].to_pylist() if not k.startswith("\x00")}
    assert still_open == {"ann", "bob"}
    harness.close()


def test_malformed_clicks_are_rejected_not_counted(tmp_path: Path) -> None:
    harness = Harness(Sessionize(gap_ms=10), tmp_path, channels=2)
    table = pa.table(
        {
            "user_id": ["ann", "bob", "cid"],
            "page": ["/a", None, "/c"],
            "event_time": pa.array([1, 2, None], pa.int64()),
        },
        schema=INPUT_SCHEMA,
    )
    first = harness.run(Batch(table))
    flushed = harness.run(clicks([], watermark_ms=FLUSH))
    assert sessions(first, flushed) == [("ann", "/a", 1, 1, 1)]
    reason = "malformed event: user_id, page or event_time is null"
    assert rejected(first) == [("bob", None, 2, reason), ("cid", "/c", None, reason)]
    harness.close()


def test_negative_gap_is_refused() -> None:
    with pytest.raises(ValueError, match="gap_ms"):
        Sessionize(gap_ms=-1)


def test_a_replayed_batch_gives_the_same_outputs_and_changes_nothing(tmp_path: Path) -> None:
    harness = Harness(Sessionize(gap_ms=30_000), tmp_path, channels=3)
    first = harness.run(HAND_BATCHES[0])
    second = harness.run(HAND_BATCHES[1])
    entries = sorted(map(repr, harness.entries().to_pylist()))
    for crash in (True, False):  # a restarted process, and a live one re-running the batch
        again = harness.rerun(crash=crash)
        assert again.replayed_channels == list(harness.layout.channels)
        assert sessions(again) == sessions(second)
        assert rejected(again) == rejected(second)
        assert sorted(map(repr, harness.entries().to_pylist())) == entries
    rest = [harness.run(batch) for batch in HAND_BATCHES[2:]]
    assert sessions(first, second, *rest) == sessions_oracle(oracle_input(harness), 30_000, 150_001)
    harness.close()


# ---- property: any batching, routing and rescaling gives the oracle's sessions ----------------

USERS = ["ann", "bob", "cid", "dee"]
PAGES = ["/a", "/b", "/c"]
GAP_MS = 8

Raw = tuple[int, list[tuple[str, str, int]]]
"""(watermark advance, clicks as (user, page, event time offset from the batch's watermark))."""


def raw_batches() -> st.SearchStrategy[Raw]:
    rows = st.lists(st.tuples(st.sampled_from(USERS), st.sampled_from(PAGES), st.integers(-10, 30)), max_size=12)
    return st.tuples(st.integers(0, 20), rows)


def absolute(plan: list[Step]) -> list[Step]:
    """Give the batches non-decreasing watermarks and absolute event times."""
    watermark, out = 0, []
    for step in plan:
        if step[0] in ("batch", "partial"):
            advance, rows = step[1]
            watermark += advance
            batch = clicks([(u, p, watermark + dt) for u, p, dt in rows], watermark_ms=watermark)
            out.append((step[0], batch, *step[2:]))
        else:
            out.append(step)
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=steps(raw_batches()).map(absolute))
def test_sessions_equal_single_process_oracle(plan: list[Step]) -> None:
    with scratch_dir() as root:
        harness = Harness(Sessionize(gap_ms=GAP_MS), root, channels=2)
        results = drive(harness, plan)  # also checks replays give the same outputs
        before_flush = sessions(*results.values())
        flushed = harness.run(clicks([], watermark_ms=FLUSH))
        results[flushed.batch_id] = flushed
        batches = oracle_input(harness)
        last_watermark = harness.batches[-2].watermark_ms if len(harness.batches) > 1 else 0

        # Every session is emitted exactly once, only once the watermark passed it, as the oracle says.
        assert before_flush == sessions_oracle(batches[:-1], GAP_MS, last_watermark)
        assert sessions(*results.values()) == sessions_oracle(batches, GAP_MS, FLUSH)
        assert [(u, p, t) for u, p, t, _ in rejected(*results.values())] == late_events(batches)
        assert all(r[3].startswith("late event: ") for r in rejected(*results.values()))
        assert harness.entries().num_rows == 0
        harness.close()
