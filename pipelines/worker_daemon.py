"""Spark's Python worker daemon, with the imports every worker pays done once, before it forks.

Spark starts one daemon per executor (`pyspark.daemon`) and forks a Python worker from it for
each task slot. pyspark imports pandas in no worker until the first Arrow conversion asks for it
(pyarrow imports it lazily), and the elastic stage's code when the worker unpickles its first
task: every fresh worker then pays ~0.9 s and ~1.3 s on a slow machine — on its first batch after
a crash, after a rescale, and whenever Spark replaces a worker. That is most of a channel's
recovery (BENCHMARKS.md §8) and of a cold channel's first batch.

`spark.python.daemon.module` = this module (`SparkSettings.preload_worker_imports`) makes the
daemon import them once, so every forked worker inherits them. Spark's own daemon does not,
because a fork copies only the forking thread and these libraries start threads when imported:
OpenBLAS its thread pool, pyarrow's jemalloc a background thread. Both are configured off
before the imports, so the daemon is single-threaded when it forks, as Spark requires.

The imported objects are then frozen out of the garbage collector (`gc.freeze`, as Python's
documentation advises before forking). A reused worker runs a full `gc.collect()` after every
task (pyspark's daemon does), and a full collection walks every tracked object: the ~90k
objects of these imports took it 60-200 ms a task on 2 busy cores, four times a batch of a
4-channel stage, where the task itself ran 7-120 ms of Python. Frozen, they are never walked (nor
their pages copied by the walk), and a collection sees only what the worker made itself. They
live as long as the process anyway: modules are never unloaded.
"""

from __future__ import annotations

import gc
import os
import threading

_SINGLE_THREADED_IMPORTS = {
    # numpy's OpenBLAS: no thread pool (esp's workers do no BLAS work).
    "OPENBLAS_NUM_THREADS": "1",
    # pyarrow's bundled jemalloc: no background purging thread.
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}


def native_threads() -> int:
    """Threads of this process, native ones included (Linux)."""
    return len(os.listdir("/proc/self/task"))


def preload() -> None:
    """Import what a worker's first Arrow conversion would, with the libraries' threads off."""
    for name, value in _SINGLE_THREADED_IMPORTS.items():
        os.environ.setdefault(name, value)
    import pandas  # noqa: F401
    import pyarrow as pa

    pa.array([0]).to_numpy()
    # The elastic stage's own code (its store, operators, routing): a worker would import it when
    # it unpickles its first task, ~1.3 s on a slow 2-core machine, paid by every worker a
    # scale-out adds in the first batch of the new layout. It starts no threads.
    import pipelines.operator_stage  # noqa: F401

    if threading.active_count() != 1 or native_threads() != 1:
        raise RuntimeError(f"the worker daemon has {native_threads()} threads after its imports: forking it is unsafe")
    freeze_imports()


def freeze_imports() -> None:
    """Move every object alive now out of the collector's reach, for this process and its forks
    (garbage first: a frozen cycle would never be freed)."""
    gc.collect()
    gc.freeze()


def main() -> None:
    from pyspark import daemon

    preload()
    daemon.manager()


if __name__ == "__main__":
    main()
