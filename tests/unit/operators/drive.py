"""Random elastic runs for the operator property tests: batches interleaved with rescales
(split, merge, scale to N), crash-after-commit replays and partial crashes, driven through
`elasticity.operators.Harness`; checks that hold for every operator are asserted on the way."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from elasticity.operators import Batch, BatchResult, Harness

MAX_CHANNELS = 6

Step = tuple[Any, ...]


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    """A temp folder for a harness's durable state, in RAM when the machine has /dev/shm: the
    stores fsync every record, which on a busy disk makes a hypothesis run take minutes."""
    return tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)


def rescale_steps() -> st.SearchStrategy[Step]:
    return st.one_of(
        st.tuples(st.just("split"), st.integers(0, 7)),
        st.tuples(st.just("merge"), st.integers(0, 7)),
        st.tuples(st.just("scale_to"), st.integers(1, MAX_CHANNELS)),
    )


def steps(batches: st.SearchStrategy[Any], max_steps: int = 10) -> st.SearchStrategy[list[Step]]:
    """Batches, rescales, replays of the last batch and partial crashes (a random subset of the
    channels commits, then everyone restarts and the batch runs again). `batches` may draw raw
    batch descriptions that the caller maps to `Batch`es (e.g. to give them rising watermarks)."""
    return st.lists(
        st.one_of(
            st.tuples(st.just("batch"), batches),
            st.tuples(st.just("partial"), batches, st.integers(0, 63)),
            st.tuples(st.just("replay")),
            rescale_steps(),
        ),
        min_size=1,
        max_size=max_steps,
    )


def sorted_rows(table: pa.Table) -> list[str]:
    return sorted(map(repr, table.to_pylist()))


def drive(harness: Harness, plan: list[Step]) -> dict[int, BatchResult]:
    """Run the plan; returns the outputs of every batch id (a re-run replaces its batch's)."""
    results: dict[int, BatchResult] = {}
    last_was_batch = False
    for step in plan:
        kind = step[0]
        if kind == "batch":
            result = harness.run(step[1])
            results[result.batch_id] = result
        elif kind == "partial":
            channels = harness.layout.channels
            committed = {c for i, c in enumerate(channels) if step[2] >> i & 1}
            harness.run(step[1], channels=committed)
            result = harness.rerun()
            assert result.replayed_channels == sorted(committed)
            results[result.batch_id] = result
        elif kind == "replay":
            # Spark re-runs only the batch in flight: never one from before a rescale.
            if last_was_batch:
                last = max(results)
                again = harness.rerun()
                assert again.replayed_channels == list(harness.layout.channels)
                assert sorted_rows(again.output) == sorted_rows(results[last].output)
                assert sorted_rows(again.rejected) == sorted_rows(results[last].rejected)
        else:
            _rescale(harness, kind, step[1])
        if kind != "replay":
            last_was_batch = kind in ("batch", "partial")
        assert harness.misplaced_keys() == []
    return results


def _rescale(harness: Harness, kind: str, arg: int) -> None:
    channels = harness.layout.channels
    if kind == "merge" and len(channels) > 1:
        harness.rescale("merge", channels[arg % len(channels)])
    elif kind == "split" and len(channels) < MAX_CHANNELS:
        harness.rescale("split", channels[arg % len(channels)])
    elif kind == "scale_to":
        harness.rescale("scale_to", arg)


def all_batches(harness: Harness) -> list[Batch]:
    return list(harness.batches)
