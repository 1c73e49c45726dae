"""A stage's own time in a micro-batch, as As-Stream monitors it (seed 002; `elasticity.control.asstream`).

Each stage publishes one `BatchMetrics` per micro-batch on its own metrics topic
(`names.stage_metrics_topic`); `stage_tick.stage_view` turns them into the stage's batches. Its
latency γ_i is the stage's own time in the batch (`stage_ms`: its Spark job, all its channels),
not its probes' latency, which includes the stages before it in the same batch; a record without
it (an older esp, or a one-stage stream) falls back on the batch's duration.
"""

from __future__ import annotations

from pipelines.streams.metrics import BatchMetrics


def own_seconds(metrics: BatchMetrics) -> float:
    """A stage's own time in a batch: its Spark job's, or the batch's when the record has none."""
    return (metrics.stage_ms if metrics.stage_ms is not None else metrics.batch_ms) / 1000.0
