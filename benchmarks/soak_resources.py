"""What a soak watches besides results: the streams' processes and folders, the broker's log and
Dagster's storage, sampled every few seconds and judged flat or growing.

A stream that runs for months must not grow without bound: its open files, threads and memory
level off, its folders are bounded by their retention (snapshots pruned, tables compacted), and so
are the broker's log (topic retention) and Dagster's storage. `growth_violations` says which
figures kept growing over a run; `endurance_figures` summarises each one after the first
retention cycle (level at the start and end of the judged window, slope per hour).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path

import psutil

from pipelines.streams.names import checkpoint_path, control_path, elastic_path


@dataclass(frozen=True)
class FolderUsage:
    """Disk space and files below a folder (files vanishing meanwhile are skipped). Space is
    what the files occupy (allocated blocks, as `du` counts), not their apparent size: the
    broker preallocates 10 MB sparse index files per segment, which hold almost nothing."""

    bytes: int = 0
    files: int = 0

    def __add__(self, other: FolderUsage) -> FolderUsage:
        return FolderUsage(self.bytes + other.bytes, self.files + other.files)


def folder_usage(folder: Path) -> FolderUsage:
    total = files = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.stat(os.path.join(parent, name)).st_blocks * 512
            except FileNotFoundError:
                continue
            files += 1
    return FolderUsage(total, files)


def folder_bytes(folder: Path) -> int:
    return folder_usage(folder).bytes


@dataclass(frozen=True)
class ResourceSample:
    """What the soaked streams hold at one moment.

    Processes: open files and threads of the streams' process trees; resident memory of the
    drivers (the `esp stream run` Python processes), of their Spark JVMs and of the Python workers.
    Folders: the durable parts of each stream's folder (channel state, Spark checkpoint,
    migration area, control folder), and the whole folder (tables and local stores included);
    the broker's data folder (its topics' logs); Dagster's storage (`DAGSTER_HOME`)."""

    at_s: float
    open_files: int
    threads: int
    state_bytes: int
    checkpoint_bytes: int
    migrations_bytes: int
    control_bytes: int
    stream_bytes: int = 0
    stream_files: int = 0
    broker_log_bytes: int = 0
    dagster_bytes: int = 0
    driver_rss: int = 0
    worker_rss: int = 0
    jvm_rss: int = 0


# Figures a soak with kills judges: a stream restarted every minute never reaches the levels of a
# long-lived one, and its input (broker log, bronze archive) grows by design when topics keep
# everything, so only these are expected flat there.
KILL_SOAK_FIGURES = ("open_files", "threads", "state_bytes", "checkpoint_bytes", "migrations_bytes", "control_bytes")
# An endurance run (no kills, topics with a short retention) judges everything.
ENDURANCE_FIGURES = tuple(f.name for f in fields(ResourceSample) if f.name != "at_s")

# A monitor sample every 2 s: 300 are 10 minutes, the shortest run whose quarters span several
# stream restarts (shorter runs are not judged).
MIN_SAMPLES = 300
# What "flat" allows over a run: the last quarter's median may exceed the second quarter's peak
# by this factor plus this slack (a snapshot and its changelogs coexisting, Spark's checkpoint
# retention filling up, a garbage collection yet to run).
FLAT_FACTOR = 1.5
MIB = 1 << 20
FLAT_SLACK = {
    "open_files": 128,
    "threads": 128,
    "state_bytes": 4 * MIB,
    "checkpoint_bytes": 4 * MIB,
    "migrations_bytes": 1 * MIB,
    "control_bytes": 1 * MIB,
    "stream_bytes": 16 * MIB,
    "stream_files": 2_000,
    "broker_log_bytes": 16 * MIB,
    "dagster_bytes": 8 * MIB,
    "driver_rss": 128 * MIB,
    "worker_rss": 128 * MIB,
    "jvm_rss": 256 * MIB,
}


def growth_violations(samples: list[ResourceSample], figures: Iterable[str] = KILL_SOAK_FIGURES) -> list[str]:
    """Figures that kept growing: the last quarter's median above FLAT_FACTOR times the second
    quarter's peak, plus the slack. A long-lived driver levels off higher than one restarted
    every minute (thread pools fill), so the bar is the highest level already reached, and the
    median, so that one spike during a rescale does not count; a leak grows past both. Fewer
    than MIN_SAMPLES samples say nothing."""
    if len(samples) < MIN_SAMPLES:
        return []
    quarter = len(samples) // 4
    second, last = samples[quarter : 2 * quarter], samples[-quarter:]
    found = []
    for name in figures:
        before = max(getattr(s, name) for s in second)
        after = statistics.median(getattr(s, name) for s in last)
        if after > before * FLAT_FACTOR + FLAT_SLACK[name]:
            found.append(
                f"{name} kept growing: peak {before:.0f} in the second quarter, median {after:.0f} in the last"
            )
    return found


@dataclass(frozen=True)
class Trend:
    """One figure over the judged window: median level at its start and end, least-squares slope."""

    name: str
    start: float
    end: float
    per_hour: float


def trend(samples: list[ResourceSample], name: str, edge_s: float = 300.0) -> Trend:
    """`name`'s level over the first and last `edge_s` of `samples`, and its slope per hour."""
    at = [s.at_s for s in samples]
    values = [float(getattr(s, name)) for s in samples]
    first = [v for t, v in zip(at, values) if t <= at[0] + edge_s]
    last = [v for t, v in zip(at, values) if t >= at[-1] - edge_s]
    slope = statistics.linear_regression(at, values).slope if len(set(at)) > 1 else 0.0
    return Trend(name, statistics.median(first), statistics.median(last), slope * 3600)


# An endurance figure kept growing when, over the judged window, both its level (the median of
# the window's last minutes against its first) and its least-squares line rose by more than this
# share of its level, or by the slack if that is more. Both, so that neither one sawtooth of the
# broker's segment deletion nor one late spike decides; a leak raises both.
ENDURANCE_TOLERANCE = 0.25


def endurance_figures(samples: list[ResourceSample], settle_s: float) -> tuple[list[Trend], list[str]]:
    """Trends of every figure after `settle_s` (the first retention cycle), and the ones that
    kept growing there."""
    judged = [s for s in samples if s.at_s >= settle_s]
    if len(judged) < 2 or judged[-1].at_s - judged[0].at_s < 600:
        return [], [f"under 10 minutes of samples after the first retention cycle ({settle_s:.0f} s): too short"]
    hours = (judged[-1].at_s - judged[0].at_s) / 3600
    trends = [trend(judged, name) for name in ENDURANCE_FIGURES]
    growing = [
        f"{t.name} kept growing after the first retention cycle: {t.start:.0f} -> {t.end:.0f}, {t.per_hour:+.0f}/h"
        for t in trends
        if min(t.end - t.start, t.per_hour * hours) > max(ENDURANCE_TOLERANCE * t.start, FLAT_SLACK[t.name])
    ]
    return trends, growing


@dataclass(frozen=True)
class WatchedFolders:
    """Where a soak's streams, broker and Dagster keep their files."""

    stream_roots: tuple[Path, ...]
    broker_data: Path | None = None
    dagster_home: Path | None = None


def sample_resources(at_s: float, processes: list[psutil.Process], folders: WatchedFolders) -> ResourceSample:
    """One sample of the streams' `processes` (every process of their trees) and `folders`."""
    open_files = threads = 0
    rss = {"driver": 0, "jvm": 0, "worker": 0}
    for process in processes:
        try:
            open_files += process.num_fds()
            threads += process.num_threads()
            rss[_role(process)] += process.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    roots = folders.stream_roots
    streams = sum((folder_usage(r) for r in roots), FolderUsage())
    return ResourceSample(
        at_s=round(at_s, 1),
        open_files=open_files,
        threads=threads,
        state_bytes=sum(folder_bytes(Path(elastic_path(r)) / "channels") for r in roots),
        checkpoint_bytes=sum(folder_bytes(Path(checkpoint_path(r))) for r in roots),
        migrations_bytes=sum(folder_bytes(Path(elastic_path(r)) / "migrations") for r in roots),
        control_bytes=sum(folder_bytes(Path(control_path(r))) for r in roots),
        stream_bytes=streams.bytes,
        stream_files=streams.files,
        broker_log_bytes=folder_bytes(folders.broker_data) if folders.broker_data else 0,
        dagster_bytes=folder_bytes(folders.dagster_home) if folders.dagster_home else 0,
        driver_rss=rss["driver"],
        worker_rss=rss["worker"],
        jvm_rss=rss["jvm"],
    )


def _role(process: psutil.Process) -> str:
    """ "worker" for a PySpark worker, "jvm" for a Spark JVM, "driver" for the rest (esp itself)."""
    command = process.cmdline()
    if any("pyspark.daemon" in part or "pyspark.worker" in part for part in command):
        return "worker"
    return "jvm" if command and os.path.basename(command[0]) == "java" else "driver"
