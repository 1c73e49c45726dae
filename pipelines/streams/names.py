"""The names a stream derives from its own name and folder, in one place: its Kafka topics and
the layout of its folder. `StreamSpec` exposes them for one stream; code that has only a stream's
name or folder (benchmarks, tests, the native baseline, descriptions) calls these directly.

(The Dagster names of a stream's assets, jobs and sensors are orchestration's:
`orchestration.names`.)
"""

from __future__ import annotations

from pathlib import Path

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


# -- the stream's folder --------------------------------------------------------------------------


def checkpoint_path(root: str | Path) -> Path:
    """The streaming query's checkpoint."""
    return Path(root) / "checkpoint"


def elastic_path(root: str | Path) -> Path:
    """Layout registry, channel state histories, migration areas."""
    return Path(root) / "elastic"


def local_state_path(root: str | Path) -> Path:
    """The channels' local state stores."""
    return Path(root) / "local"


def control_path(root: str | Path) -> Path:
    """Rescale requests and their results, the watermark log, the elasticity policy override, plots."""
    return Path(root) / "control"


def results_table_path(root: str | Path) -> Path:
    return Path(root) / "tables" / "results"


def late_table_path(root: str | Path) -> Path:
    """adclicks: window counts that arrived after their window closed, per batch."""
    return Path(root) / "tables" / "late"


def bronze_table_path(root: str | Path) -> Path:
    """Every accepted input record, per date and batch id."""
    return Path(root) / "tables" / "bronze"


def daily_table_path(root: str | Path) -> Path:
    """The daily batch recomputation from the bronze archive, per date."""
    return Path(root) / "tables" / "daily"
