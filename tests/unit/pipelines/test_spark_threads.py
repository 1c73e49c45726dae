"""run_concurrently: the batch's outputs run side by side, and a failure surfaces only after
every output has ended (nothing is left writing once the batch gave up)."""

from __future__ import annotations

import threading
import time

import pytest

from pipelines.spark_threads import run_concurrently


def test_actions_overlap_and_results_come_back_by_name() -> None:
    barrier = threading.Barrier(3, timeout=5)

    def meet(value: str):
        return lambda: (barrier.wait(), value)[1]  # only returns if all three run at once

    results, ms = run_concurrently({"a": meet("A"), "b": meet("B"), "c": meet("C")})
    assert results == {"a": "A", "b": "B", "c": "C"}
    assert set(ms) == {"a", "b", "c"} and all(v >= 0 for v in ms.values())


def test_first_failure_is_raised_after_every_action_ended() -> None:
    finished = threading.Event()

    def slow() -> None:
        time.sleep(0.3)
        finished.set()

    def broken() -> None:
        raise ValueError("dead letters failed")

    with pytest.raises(ValueError, match="dead letters failed"):
        run_concurrently({"broken": broken, "slow": slow})
    assert finished.is_set()


def test_failures_are_reported_in_the_given_order() -> None:
    def fail(message: str):
        def action() -> None:
            raise RuntimeError(message)

        return action

    with pytest.raises(RuntimeError, match="first"):
        run_concurrently({"one": fail("first"), "two": fail("second")})
