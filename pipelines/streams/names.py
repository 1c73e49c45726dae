"""The names a stream derives from its own name and folder, in one place: its Kafka topics and
the layout of its folder. `StreamSpec` exposes them for one stream; code that has only a stream's
name or folder (benchmarks, tests, the native baseline, descriptions) calls these directly.

Folders are strings (a local path or a URI, see `elasticity.state.uris`), derived with
`uris.join`: never `pathlib`, which reads `file:///a` as the relative path `file:/a`. Code that
needs a local folder (benchmarks, tests, compaction) asks `uris.local_path`, which refuses a root
on an object store by name.

(The Dagster names of a stream's assets, jobs and sensors are orchestration's:
`orchestration.names`.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from elasticity.state import uris

FIRST_STAGE = "main"
"""The name of a job's first elastic stage; its folders are the stream's own."""

# -- Kafka topics ---------------------------------------------------------------------------------


def results_topic(stream: str) -> str:
    """Result updates (every key a batch touched, with its new count)."""
    return f"{stream}.results"


def dead_letter_topic(stream: str) -> str:
    """Rejected input records with their reason."""
    return f"{stream}.dlq"


def metrics_topic(stream: str) -> str:
    """One `BatchMetrics` per micro-batch (what the elasticity sensor reads)."""
    return f"{stream}.metrics"


def stage_metrics_topic(stream: str, stage: str) -> str:
    """One `BatchMetrics` per micro-batch of one elastic stage: the stream's own topic for the first
    stage, `<stream>.metrics.<stage>` for a later one (each stage's reader sees only its own)."""
    return metrics_topic(stream) if stage == FIRST_STAGE else f"{metrics_topic(stream)}.{stage}"


# -- the stream's folder --------------------------------------------------------------------------


def checkpoint_path(root: str | os.PathLike[str]) -> str:
    """The streaming query's checkpoint."""
    return uris.join(root, "checkpoint")


def elastic_path(root: str | os.PathLike[str]) -> str:
    """Layout registry, channel state histories, migration areas."""
    return uris.join(root, "elastic")


def local_state_path(root: str | os.PathLike[str]) -> str:
    """The channels' local state stores (RocksDB wants a local disk: for a root on an object store,
    a folder on this machine named after it; the stores are rebuilt from the durable history)."""
    if not uris.is_local(os.fspath(root)):
        return uris.local_cache(os.fspath(root))
    return uris.join(root, "local")


def control_path(root: str | os.PathLike[str]) -> str:
    """Rescale requests and their results, the watermark log, the elasticity policy override, plots,
    the admission cap."""
    return uris.join(root, "control")


def results_table_path(root: str | os.PathLike[str]) -> str:
    return uris.join(root, "tables", "results")


def rejected_table_path(root: str | os.PathLike[str]) -> str:
    """Rows a job's operator rejected (late events...), per batch, with the reason."""
    return uris.join(root, "tables", "rejected")


def late_table_path(root: str | os.PathLike[str]) -> str:
    """adclicks: window counts that arrived after their window closed, per batch."""
    return uris.join(root, "tables", "late")


def bronze_table_path(root: str | os.PathLike[str]) -> str:
    """Every accepted input record, per date and batch id."""
    return uris.join(root, "tables", "bronze")


def daily_table_path(root: str | os.PathLike[str]) -> str:
    """The daily batch recomputation from the bronze archive, per date."""
    return uris.join(root, "tables", "daily")


# -- a job's elastic stages -------------------------------------------------------------------------


@dataclass(frozen=True)
class StagePaths:
    """Where one elastic stage keeps its layout and state (`elastic`), its working copies (`local`)
    and its rescale requests and results (`control`)."""

    elastic: str
    local: str
    control: str


def stage_paths(root: str | os.PathLike[str], stage: str) -> StagePaths:
    """The first stage uses the stream's folders (as a one-stage stream always has); a later stage
    has its own under `stages/<name>/`, so rescaling one stage never touches another's files."""
    if stage == FIRST_STAGE:
        return StagePaths(elastic_path(root), local_state_path(root), control_path(root))
    folder = uris.join(root, "stages", stage)
    return StagePaths(elastic_path(folder), local_state_path(folder), control_path(folder))
