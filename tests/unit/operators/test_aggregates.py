"""Property tests of the built-in per-key aggregates: random batches, random rescales (split,
merge, scale), replays and partial crashes give exactly what one process computing each key's
aggregate over all its values gives, and a replayed batch emits what its first run emitted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import datasketches
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elasticity.operators import (
    Aggregate,
    ApproxDistinct,
    Batch,
    Count,
    Harness,
    IntSum,
    KeyedAggregate,
    Max,
    Mean,
    Min,
    Sum,
    TopK,
)

from .drive import drive, scratch_dir, steps

KEYS = [f"user-{i}" for i in range(12)]


def batches() -> st.SearchStrategy[Batch]:
    rows = st.lists(st.tuples(st.sampled_from(KEYS), st.integers(-50, 50)), max_size=25)
    return rows.map(
        lambda r: Batch(pa.table({"key": pa.array([k for k, _ in r], pa.string()), "value": [float(v) for _, v in r]}))
    )


def exact_distinct_sketch(values: list[float]) -> int:
    sketch = datasketches.hll_sketch(12)
    for v in values:
        sketch.update(str(v))
    return round(sketch.get_estimate())


# aggregate, oracle over one key's values in arrival order (plain Python, not the aggregate's code)
CASES: dict[str, tuple[Callable[[], Aggregate[Any]], Callable[[list[float]], Any]]] = {
    "count": (Count, len),
    "sum": (Sum, sum),
    "min": (Min, min),
    "max": (Max, max),
    "mean": (Mean, lambda vs: sum(vs) / len(vs)),
    "top_k": (lambda: TopK(3), lambda vs: sorted(vs, reverse=True)[:3]),
    "approx_distinct": (ApproxDistinct, exact_distinct_sketch),
}


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=steps(batches()))
def test_aggregate_equals_single_process_oracle(name: str, plan: list[tuple[Any, ...]]) -> None:
    make, oracle = CASES[name]
    with scratch_dir() as root:
        harness = Harness(KeyedAggregate(make()), root, channels=2)
        results = drive(harness, plan)
        values: dict[str, list[float]] = {}
        for batch in harness.batches:
            for row in batch.rows.to_pylist():
                values.setdefault(row["key"], []).append(row["value"])
        latest: dict[str, Any] = {}
        for batch_id in sorted(results):
            for row in results[batch_id].output.to_pylist():
                latest[row["key"]] = row["value"]
        assert latest == {key: oracle(vs) for key, vs in values.items()}
        harness.close()


@settings(max_examples=30, deadline=None)
@given(
    batches_of=st.lists(
        st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(-(2**40), 2**40)), max_size=30),
        min_size=1,
        max_size=6,
    )
)
def test_int_sum_is_exact_across_rescales(batches_of: list[list[tuple[str, int]]]) -> None:
    """Pre-aggregated counts (the word count's deltas) summed exactly, in int64, through rescales."""
    with scratch_dir() as root:
        harness = Harness(KeyedAggregate(IntSum(), value_column="n"), root, channels=2)
        latest: dict[str, int] = {}
        for i, rows in enumerate(batches_of):
            table = pa.table({"key": [k for k, _ in rows], "n": pa.array([n for _, n in rows], pa.int64())})
            for row in harness.run(Batch(table)).output.to_pylist():
                latest[row["key"]] = row["value"]
            harness.rescale("split" if i % 2 == 0 else "merge", harness.layout.channels[0])
        totals: dict[str, int] = {}
        for rows in batches_of:
            for key, n in rows:
                totals[key] = totals.get(key, 0) + n
        assert latest == totals
        harness.close()


@settings(max_examples=10, deadline=None)
@given(values=st.lists(st.integers(0, 5000), min_size=1, max_size=400))
def test_approx_distinct_is_close_to_the_true_count(values: list[int]) -> None:
    with scratch_dir() as root:
        harness = Harness(KeyedAggregate(ApproxDistinct()), root, channels=2)
        half = len(values) // 2
        for part in (values[:half], values[half:]):
            harness.run(Batch(pa.table({"key": ["k"] * len(part), "value": [float(v) for v in part]})))
            harness.rescale("split", harness.layout.channels[0])
        (estimate,) = [
            r["value"] for r in harness.run(Batch(pa.table({"key": ["k"], "value": [0.0]}))).output.to_pylist()
        ]
        truth = len(set(values) | {0})
        assert abs(estimate - truth) <= max(2, 0.05 * truth)
        harness.close()
