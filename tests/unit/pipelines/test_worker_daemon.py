"""Spark's Python workers fork from a daemon that imported pandas, pyarrow and the elastic stage's
code once, with their threads off (so the fork is safe): a fresh worker pays no import, and its
per-task garbage collection does not walk the imported objects."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pyarrow as pa

from pipelines.settings import SparkSettings
from pipelines.spark_session import spark_conf, warm_python_workers


def test_the_daemon_preloads_and_stays_single_threaded() -> None:
    probe = (
        "import sys, pipelines.worker_daemon as d; d.preload(); "
        "print(d.native_threads(), 'pandas' in sys.modules, 'pipelines.operator_stage' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout.split()
    assert out == ["1", "True", "True"]


def test_the_daemon_freezes_what_it_imported_out_of_the_collectors_walk() -> None:
    probe = "import gc, pipelines.worker_daemon as d; d.preload(); print(gc.get_freeze_count(), len(gc.get_objects()))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout.split()
    frozen, walked = map(int, out)
    # pandas, pyarrow and the stage's code are tens of thousands of objects; a collection walks
    # only the few made after the freeze.
    assert frozen > 20_000 and walked < frozen / 20, (frozen, walked)


def test_the_session_names_the_daemon_unless_turned_off() -> None:
    assert spark_conf(SparkSettings(), [])["spark.python.daemon.module"] == "pipelines.worker_daemon"
    assert "spark.python.daemon.module" not in spark_conf(SparkSettings(preload_worker_imports=False), [])


PRELOADED = {"pandas": "pandas", "stage": "pipelines.operator_stage"}


def _who_forked_me(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import gc
    import os
    import sys

    for _ in batches:
        pass
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        parent = f.read().replace(b"\0", b" ").decode()
    loaded = {name: pa.array([module in sys.modules]) for name, module in PRELOADED.items()}
    # What pyspark's daemon's gc.collect() after each task walks, against what the fork left frozen.
    walk = {"frozen": pa.array([gc.get_freeze_count()]), "walked": pa.array([len(gc.get_objects())])}
    yield pa.RecordBatch.from_pydict({"parent": pa.array([parent]), **loaded, **walk})


def test_workers_fork_from_the_preloading_daemon(spark) -> None:
    assert warm_python_workers(spark, 2) is not None
    schema = "parent string, pandas boolean, stage boolean, frozen long, walked long"
    rows = spark.range(2, numPartitions=2).mapInArrow(_who_forked_me, schema).collect()
    assert rows and all("pipelines.worker_daemon" in r.parent and r.pandas and r.stage for r in rows), rows
    # The task's own unpickling and imports add some; the daemon's imports stay frozen.
    assert all(r.frozen > 20_000 and r.walked < r.frozen / 2 for r in rows), rows
