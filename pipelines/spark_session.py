"""The one Spark session factory used by every esp job, test and Dagster resource.

The Kafka connector jars must be on `spark.jars` before the JVM starts, so the session is built
here and nowhere else. So must Hadoop's s3a connector for a stream whose folder is on an object
store: `build_spark_session(settings, roots=...)` adds it, with the store's endpoint, when a root is.
So must esp's own Hadoop local file system classes (`nio_local_fs_conf`), which save a process per
file a micro-batch creates.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, MutableMapping
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession

from elasticity.state import uris
from pipelines.settings import EspSettings, ObjectStoreAccess, SparkSettings

log = logging.getLogger(__name__)


class MissingJarsError(RuntimeError):
    """The Maven-resolved connector jars are not where the settings say."""


def _jar_group(jars_dir: Path, group: str, marker: str, missing: str, resolve: str) -> list[Path]:
    """The jars infra/jvm resolved into `jars_dir/group`; MissingJarsError saying `missing` and
    the command that resolves them (`resolve`) when none is named `marker*`."""
    folder = jars_dir / group
    jars = sorted(folder.glob("*.jar"))
    if not any(j.name.startswith(marker) for j in jars):
        raise MissingJarsError(f"{missing} is missing from {folder}; run {resolve} first")
    return jars


def connector_jars(jars_dir: Path) -> list[Path]:
    """The Spark-Kafka connector jars resolved by infra/jvm into `jars_dir/spark-kafka`."""
    return _jar_group(
        jars_dir, "spark-kafka", "spark-sql-kafka", "Spark's Kafka connector", "`esp infra jars` (or `make jars`)"
    )


def s3a_jars(jars_dir: Path) -> list[Path]:
    """Hadoop's s3a connector and the AWS SDK bundle, resolved by infra/jvm into `jars_dir/spark-s3a`."""
    return _jar_group(
        jars_dir,
        "spark-s3a",
        "hadoop-aws-",
        "Hadoop's s3a connector (for a stream folder on S3)",
        "`esp infra jars --object-store` (or `make jars-s3a`)",
    )


def local_fs_jars(jars_dir: Path) -> list[Path]:
    """esp's Hadoop local file system classes, compiled by infra/jvm into `jars_dir/local-fs`."""
    return _jar_group(
        jars_dir, "local-fs", "esp-local-fs", "esp's local file system jar", "`esp infra jars` (or `make jars`)"
    )


NIO_LOCAL_FS_CLASSES = {
    "fs.file.impl": "dev.esp.hadoop.NioLocalFileSystem",
    "fs.AbstractFileSystem.file.impl": "dev.esp.hadoop.NioLocalFs",
}
"""Hadoop's two local file system APIs (FileSystem; FileContext, which Spark's checkpoint logs use)."""

HADOOP_LOCAL_FS = "org.apache.hadoop.fs.LocalFileSystem"
"""Hadoop's default class for `file:` paths (FileSystem API)."""


def nio_local_fs_conf(jars: list[Path]) -> dict[str, str]:
    """Spark conf that opens `file:` paths with esp's java.nio local file system (infra/jvm/local-fs).

    Without Hadoop's native library (pyspark ships none), Hadoop starts a `chmod` process for every
    file and folder it creates and a `readlink` process for every checkpoint log it renames, ~5 ms
    each. The jar goes on the JVMs' class path, not `spark.jars`: Hadoop may look the class up with a
    class loader that never saw `spark.jars` (a Configuration made before they were added)."""
    return class_path_conf(jars) | {f"spark.hadoop.{key}": value for key, value in NIO_LOCAL_FS_CLASSES.items()}


def local_fs_class(spark: SparkSession) -> str:
    """The class the session opens `file:` paths with: esp's java.nio one, or Hadoop's own."""
    return str(spark.sparkContext.getConf().get("spark.hadoop.fs.file.impl", HADOOP_LOCAL_FS))


_CLASS_PATHS = ("spark.driver.extraClassPath", "spark.executor.extraClassPath")


def class_path_conf(jars: list[Path]) -> dict[str, str]:
    """`jars` on the driver's and the executors' JVM class path."""
    classpath = ":".join(str(j) for j in jars)
    return dict.fromkeys(_CLASS_PATHS, classpath)


def merged_conf(*confs: dict[str, str]) -> dict[str, str]:
    """The confs in order, later values winning, except the extra class paths, which are joined."""
    merged: dict[str, str] = {}
    for conf in confs:
        for key, value in conf.items():
            joined = key in _CLASS_PATHS and merged.get(key)
            merged[key] = f"{merged[key]}:{value}" if joined else value
    return merged


def object_store_conf(access: ObjectStoreAccess, jars: list[Path]) -> dict[str, str]:
    """Spark conf for folders on the object store: the s3a jars on the driver's and executors' class
    path (local paths, not `spark.jars`: the SDK bundle is ~650 MB, not to be copied per executor),
    the connector's `fs.s3a.*` settings, and the AWS variables the executors' Python workers (the
    state layer) read, so they reach the store Spark reaches."""
    conf = class_path_conf(jars)
    conf |= {f"spark.hadoop.{key}": value for key, value in access.hadoop_conf().items()}
    conf |= {f"spark.executorEnv.{name}": value for name, value in access.environment().items()}
    return conf


def object_store_session(
    settings: EspSettings, roots: Iterable[str], environ: MutableMapping[str, str]
) -> dict[str, str]:
    """The Spark conf a session needs for these stream roots, empty when every root is local. The
    store's endpoint and region are resolved once, from the settings then the AWS variables of
    `environ`, written back to `environ` (the JVM and its Python workers inherit it; this process's
    pyarrow reads it) and given to Spark's s3a connector: one store for both."""
    if all(uris.is_local(root) for root in roots):
        return {}
    access = settings.object_store.export(environ)
    return object_store_conf(access, s3a_jars(settings.jars_dir))


def spark_conf(spark: SparkSettings, jars: list[Path]) -> dict[str, str]:
    """The full conf map for a session: esp's defaults, then the user's `spark.conf`."""
    conf = {
        "spark.master": spark.master,
        "spark.app.name": spark.app_name,
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.ui.enabled": str(spark.ui_enabled).lower(),
        # Killing a stage or job from the UI fails the streaming query's batch: a crash.
        "spark.ui.killEnabled": "false",
        "spark.sql.shuffle.partitions": str(spark.shuffle_partitions),
        "spark.driver.memory": spark.driver_memory,
        "spark.sql.session.timeZone": "UTC",
        # Stay on loopback: the driver would otherwise bind to the host's first interface.
        "spark.driver.host": spark.driver_host,
        "spark.driver.bindAddress": spark.driver_host,
        # Adaptive execution would coalesce the elastic stage's partitions and break the
        # one-channel-one-task placement.
        "spark.sql.adaptive.enabled": "false",
        # Workers must run the interpreter that has esp's packages (the project's venv).
        "spark.pyspark.python": spark.python_executable or sys.executable,
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
    }
    # PySpark records the Python call site of every Column and DataFrame call for error messages
    # (five JVM round trips and a walk of the stack each); a micro-batch makes hundreds of them.
    conf["spark.python.sql.dataFrameDebugging.enabled"] = str(spark.dataframe_call_sites).lower()
    if spark.preload_worker_imports:
        # Workers fork with pandas and pyarrow already imported (see the module's docstring).
        conf["spark.python.daemon.module"] = "pipelines.worker_daemon"
    conf.update(spark.conf)
    return conf


def driver_environment(spark: SparkSettings) -> dict[str, str]:
    """Environment the driver JVM must start with: what Spark reads from the environment only.

    PySpark picks the workers' interpreter from PYSPARK_PYTHON when the context starts
    (spark.pyspark.python only reaches spark-submit). The web UI binds to SPARK_LOCAL_IP and to
    every interface without it: no Spark conf moves it.
    """
    return {"PYSPARK_PYTHON": spark.python_executable or sys.executable, "SPARK_LOCAL_IP": spark.ui_host}


def session_conf(settings: EspSettings, jars: list[Path]) -> dict[str, str]:
    """`spark_conf`, plus on esp's Spark cluster (the master is its URL) executors sized to fill one
    worker each, so every worker runs one; `spark.conf` still wins. On a cluster the `spark.jars`
    (local paths) are served by the driver to every executor, and the executors' Python is the
    driver's (`spark.pyspark.python`, PYSPARK_PYTHON): the same venv on this machine."""
    conf = spark_conf(settings.spark, jars)
    if settings.spark.master == settings.spark_cluster.master_url:
        conf = {**settings.spark_cluster.executor_conf(), **conf}
    return conf


def build_spark_session(settings: EspSettings, roots: Iterable[str] = ()) -> SparkSession:
    """Get or create the process's Spark session with the Kafka connector on its classpath, and
    the s3a connector when one of the stream `roots` is on an object store, and esp's local file
    system classes (`spark.conf` still wins; one that sets `spark.driver.extraClassPath` must keep
    those jars on it)."""
    store_conf = object_store_session(settings, roots, os.environ)
    local_fs = nio_local_fs_conf(local_fs_jars(settings.jars_dir)) if settings.spark.nio_local_fs else {}
    # The JVM inherits this process's environment when it starts (first session of the process).
    os.environ.update(driver_environment(settings.spark))
    builder = SparkSession.builder
    conf = {**merged_conf(local_fs, store_conf), **session_conf(settings, connector_jars(settings.jars_dir))}
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _started(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"id": pa.array([0], pa.int64())})


def warm_python_workers(spark: SparkSession, workers: int) -> float | None:
    """Start the executors' Python worker daemon and `workers` workers now, with one empty Arrow
    task each, rather than in a stream's first batch; the seconds it took (None: it failed, which
    only leaves that cost to the first batch). With `preload_worker_imports` the daemon imports
    pandas and pyarrow as it starts (`pipelines.worker_daemon`), so this is where a restarted
    stream pays them, once, instead of every channel in its first batch."""
    started = time.perf_counter()
    try:
        spark.range(workers, numPartitions=workers).mapInArrow(_started, "id long").collect()
    except Exception:  # a warm-up never stops a stream
        log.warning("could not start the Python workers ahead of the first batch", exc_info=True)
        return None
    return time.perf_counter() - started
