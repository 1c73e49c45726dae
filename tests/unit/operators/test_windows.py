"""Property tests of tumbling, sliding and session windows with a watermark: under random
batches, rescales, replays and partial crashes every window is emitted exactly once with the
value a single process computes from the on-time rows, and exactly the late rows (event time
below their batch's watermark) are reported and left out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elasticity.operators import (
    Aggregate,
    Batch,
    Count,
    Harness,
    Session,
    Sliding,
    Sum,
    Tumbling,
    WindowedAggregate,
    Windowing,
)

from .drive import Step, drive, scratch_dir, steps

KEYS = ["a", "b", "c", "d", "e"]
FLUSH = 10**9

Raw = tuple[int, list[tuple[str, int, int]]]
"""(watermark advance, rows as (key, event time offset from the watermark, value))."""


def raw_batches() -> st.SearchStrategy[Raw]:
    rows = st.lists(st.tuples(st.sampled_from(KEYS), st.integers(-15, 40), st.integers(0, 9)), max_size=15)
    return st.tuples(st.integers(0, 25), rows)


def plans() -> st.SearchStrategy[list[Step]]:
    return steps(raw_batches()).map(absolute)


def absolute(plan: list[Step]) -> list[Step]:
    """Give each batch a non-decreasing watermark and absolute event times."""
    watermark, out = 0, []
    for step in plan:
        if step[0] in ("batch", "partial"):
            advance, rows = step[1]
            watermark += advance
            batch = Batch(
                pa.table(
                    {
                        "key": pa.array([k for k, _, _ in rows], pa.string()),
                        "ts": pa.array([watermark + dt for _, dt, _ in rows], pa.int64()),
                        "value": pa.array([float(v) for _, _, v in rows], pa.float64()),
                    }
                ),
                watermark_ms=watermark,
            )
            out.append((step[0], batch, *step[2:]))
        else:
            out.append(step)
    return out


def windows_of(windowing: Windowing, key_times: list[int]) -> list[tuple[int, int, list[int]]]:
    """Oracle: every window of one key's on-time event times, with the indices of its rows."""
    if isinstance(windowing, Tumbling):
        starts = [[t // windowing.size_ms * windowing.size_ms] for t in key_times]
        size = windowing.size_ms
    elif isinstance(windowing, Sliding):
        size = windowing.size_ms
        starts = [[s for s in range(t - size + 1, t + 1) if s % windowing.slide_ms == 0] for t in key_times]
    else:
        assert isinstance(windowing, Session)
        order = sorted(range(len(key_times)), key=lambda i: key_times[i])
        sessions: list[tuple[int, int, list[int]]] = []
        for i in order:
            t = key_times[i]
            if sessions and t < sessions[-1][1]:
                s, _, members = sessions[-1]
                sessions[-1] = (s, t + windowing.gap_ms, [*members, i])
            else:
                sessions.append((t, t + windowing.gap_ms, [i]))
        return sessions
    grouped: dict[int, list[int]] = {}
    for i, window_starts in enumerate(starts):
        for s in window_starts:
            grouped.setdefault(s, []).append(i)
    return [(s, s + size, members) for s, members in grouped.items()]


WINDOWINGS: dict[str, Windowing] = {
    "tumbling": Tumbling(10),
    "sliding": Sliding(20, 5),
    "session": Session(8),
}
AGGREGATES: dict[str, tuple[Callable[[], Aggregate[Any]], Callable[[list[float]], Any]]] = {
    "count": (Count, len),
    "sum": (Sum, sum),
}


@pytest.mark.parametrize("aggregate", sorted(AGGREGATES))
@pytest.mark.parametrize("windowing", sorted(WINDOWINGS))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans())
def test_windows_equal_single_process_oracle(windowing: str, aggregate: str, plan: list[Step]) -> None:
    make, fold = AGGREGATES[aggregate]
    with scratch_dir() as root:
        harness = Harness(WindowedAggregate(make(), WINDOWINGS[windowing]), root, channels=2)
        results = drive(harness, plan)
        flushed = harness.run(Batch(absolute([("batch", (0, []))])[0][1].rows, watermark_ms=FLUSH))
        results[flushed.batch_id] = flushed

        on_time: dict[str, list[tuple[int, float]]] = {}
        late = []
        for batch in harness.batches:
            for row in batch.rows.to_pylist():
                if row["ts"] < batch.watermark_ms:
                    late.append((row["key"], row["ts"], row["value"]))
                else:
                    on_time.setdefault(row["key"], []).append((row["ts"], row["value"]))
        expected = sorted(
            (key, start, end, fold([rows[i][1] for i in members]))
            for key, rows in on_time.items()
            for start, end, members in windows_of(WINDOWINGS[windowing], [t for t, _ in rows])
        )
        emitted = sorted(
            (r["key"], r["window_start"], r["window_end"], r["value"])
            for result in results.values()
            for r in result.output.to_pylist()
        )
        assert emitted == expected
        reported = sorted(
            (r["key"], r["ts"], r["value"]) for result in results.values() for r in result.rejected.to_pylist()
        )
        assert reported == sorted(late)
        assert all(r["reason"] == "late" for result in results.values() for r in result.rejected.to_pylist())
        assert harness.entries().num_rows == 0  # every window emitted, its state and timer gone
        harness.close()
