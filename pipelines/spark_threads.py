"""Run independent Spark actions of one micro-batch at the same time.

A micro-batch writes several outputs that do not depend on each other (dead letters, the bronze
archive, the keyed stage). Each is a Spark job whose driver-side planning and scheduling is
mostly waiting; submitted from parallel threads, their tasks share the executors' slots and
the batch takes about as long as its longest output instead of the sum of all of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyspark.util import InheritableThread


class _Outcome:
    def __init__(self) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.ms: float = 0.0


def run_concurrently(actions: dict[str, Callable[[], Any]]) -> tuple[dict[str, Any], dict[str, float]]:
    """Run every action in its own thread and wait for all of them: (results, milliseconds),
    both by name. If any action fails, the first failure (in the given order) is raised, but
    only once every action has ended, so none is left writing after the batch gave up.

    The threads inherit the caller's Spark local properties (its job group, so stopping the
    query cancels their jobs too)."""
    outcomes = {name: _Outcome() for name in actions}
    threads = [
        InheritableThread(target=_run, args=(action, outcomes[name]), daemon=True) for name, action in actions.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for outcome in outcomes.values():
        if outcome.error is not None:
            raise outcome.error
    return {name: o.value for name, o in outcomes.items()}, {name: o.ms for name, o in outcomes.items()}


def _run(action: Callable[[], Any], outcome: _Outcome) -> None:
    started = time.perf_counter()
    try:
        outcome.value = action()
    except BaseException as error:  # handed to the caller's thread, which raises it
        outcome.error = error
    finally:
        outcome.ms = (time.perf_counter() - started) * 1000
