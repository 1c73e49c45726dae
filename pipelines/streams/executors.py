"""Executors that follow channels (`spark.executors.follow_channels`): on a cluster, more channels
get more executors and fewer channels give executors back.

At every batch boundary, before the batch runs a task, the stream asks its cluster manager for as
many executors as its layout's channels need (`ExecutorScalingSettings.executors_for`, within
the configured bounds) and
releases the surplus, those that served the fewest channels in the last batch. Nothing runs on an
executor then (the batch's jobs have not started), so a release loses no task; a channel whose
executor left rebuilds its working set from the durable history on the one it lands on, and the
batch's metrics report that move (`ChannelMetrics.executor`, `rebuild`).

The calls are Spark's DeveloperApi on the SparkContext (`requestTotalExecutors`, `killExecutor`,
`getExecutorIds`), which the standalone master, YARN and Kubernetes back ends implement.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pyspark.sql import SparkSession

from pipelines.settings import ExecutorScalingSettings

log = logging.getLogger(__name__)


def surplus_executors(executors: list[str], served: Counter[str], target: int) -> list[str]:
    """The executors to release to keep `target`: those that served the fewest channels in the
    last batch (`served`: executor id -> channels), the newest first among equals."""
    if len(executors) <= target:
        return []
    by_use = sorted(executors, key=lambda executor: (served[executor], -_numeric(executor)))
    return by_use[: len(executors) - target]


def _numeric(executor: str) -> int:
    return int(executor) if executor.isdigit() else -1


@cache  # a worker's folder is its executor's for the worker's life: read once, not per task
def worker_executor_id() -> str | None:
    """The executor this Python worker serves, on a standalone cluster (its working folder is
    `<work>/<app id>/<executor id>`); None elsewhere (local mode, other cluster managers)."""
    cwd = Path(os.getcwd())
    return cwd.name if cwd.parent.name.startswith("app-") and cwd.name.isdigit() else None


@dataclass(frozen=True)
class ExecutorChange:
    """What one reconciliation did: the target asked for and the executors released."""

    target: int
    released: tuple[str, ...]


class FollowingExecutors:
    """The stream's executors kept at what its channels need, through the SparkContext."""

    def __init__(self, spark: SparkSession, scaling: ExecutorScalingSettings) -> None:
        # PySpark has no Python API for the DeveloperApi calls: they go to the JVM's SparkContext.
        self._scala = spark.sparkContext._jsc.sc()  # noqa: SLF001
        self._jvm = spark.sparkContext._jvm  # noqa: SLF001
        self._scaling = scaling
        self._asked: int | None = None

    @classmethod
    def of(cls, spark: SparkSession, scaling: ExecutorScalingSettings) -> FollowingExecutors | None:
        """The stream's follower, or None when it is off or the session is local (no cluster)."""
        if not scaling.follow_channels or spark.sparkContext.master.startswith("local"):
            return None
        if spark.sparkContext.getConf().get("spark.dynamicAllocation.enabled", "false").lower() == "true":
            # Spark's own allocation manages the executors then, and refuses explicit kills.
            log.warning("spark.executors.follow_channels is ignored: spark.dynamicAllocation.enabled is on")
            return None
        return cls(spark, scaling)

    def executor_ids(self) -> list[str]:
        """The application's registered executors (the driver excluded)."""
        ids = self._scala.getExecutorIds()
        return [str(ids.apply(index)) for index in range(ids.size())]

    def reconcile(self, channels: int, served: Counter[str]) -> ExecutorChange:
        """Ask for the executors `channels` channels need; release the surplus. Idempotent: a
        boundary with the right executors makes no call but the listing."""
        target = self._scaling.executors_for(channels)
        released = tuple(surplus_executors(self.executor_ids(), served, target))
        for executor in released:
            # Each kill lowers the application's target by one; the request below sets it.
            self._scala.killExecutor(executor)
        if released or self._asked != target:
            no_locality = self._jvm.PythonUtils.toScalaMap(self._jvm.java.util.HashMap())
            self._scala.requestTotalExecutors(target, 0, no_locality)
            self._asked = target
            log.info("executors for %d channels: %d asked, released %s", channels, target, list(released) or "none")
        return ExecutorChange(target, released)
