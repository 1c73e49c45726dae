"""What the Dagster launchpad may set on a run's Spark session: an allowlist of tuning keys.

Anyone who reaches the UI can launch a run with any resource config. Spark conf is code
execution in the wrong hands (`spark.pyspark.python`, `spark.driver.extraJavaOptions`,
`spark.jars`, plugins, listeners), and a master URL sends the data somewhere else. So a run's
config may only tune the session with the keys below and pick a local master; everything else
comes from the esp settings file (`spark.conf`, `spark.master`), which only the operator edits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

ALLOWED_SPARK_KEYS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "Partitions of shuffles in batch and streaming plans.",
    "spark.default.parallelism": "Default partitions of RDD operations.",
    "spark.sql.files.maxPartitionBytes": "Largest file split read into one partition.",
    "spark.sql.files.openCostInBytes": "Estimated cost of opening a file, for split planning.",
    "spark.sql.autoBroadcastJoinThreshold": "Largest table broadcast in a join (-1: never).",
    "spark.sql.parquet.compression.codec": "Codec of the Parquet files written.",
    "spark.sql.streaming.numRecentProgressUpdates": "Progress updates a streaming query keeps in memory.",
    "spark.driver.maxResultSize": "Cap on the results collected to the driver.",
    "spark.executor.memory": "Executor heap (cluster masters).",
    "spark.executor.cores": "Cores per executor (cluster masters).",
    "spark.memory.fraction": "Heap share for execution and storage.",
    "spark.memory.storageFraction": "Share of that kept for storage.",
    "spark.task.maxFailures": "Attempts of a task before its job fails.",
    "spark.ui.showConsoleProgress": "Progress bars in the run's console log.",
}
"""The Spark keys a launchpad may set, each with what it tunes (README: "The launchpad")."""

LOCAL_MASTER = re.compile(r"^local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?$")
"""Masters a launchpad may pick: local, local[N], local[*], local[N,F] (tries per task)."""


class RefusedSparkConf(ValueError):
    """A launchpad asked for a Spark key or master outside the allowlist."""


def allowed_spark_conf(conf: Mapping[str, object]) -> dict[str, str]:
    """The launchpad's conf as strings, or RefusedSparkConf naming the first key not allowed."""
    for key in conf:
        if key not in ALLOWED_SPARK_KEYS:
            raise RefusedSparkConf(
                f"Spark conf key {key!r} is not allowed from the launchpad (spark_config of the spark resource); "
                f"allowed: {', '.join(sorted(ALLOWED_SPARK_KEYS))}. Set other keys in the esp settings file "
                "(spark.conf)."
            )
    return {key: str(value) for key, value in conf.items()}


def allowed_master(master: str | None, settings_master: str) -> str:
    """The launchpad's master (a local one or the settings' own), else RefusedSparkConf naming it."""
    if master is None or master == settings_master:
        return settings_master
    if not LOCAL_MASTER.match(master):
        raise RefusedSparkConf(
            f"Spark master {master!r} is not allowed from the launchpad (master of the spark resource); "
            f"use local, local[N] or local[*], or set spark.master in the esp settings file (now {settings_master!r})"
        )
    return master
