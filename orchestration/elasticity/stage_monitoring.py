"""A multi-stage job's stages as As-Stream monitors them (seed 002; `elasticity.control.asstream`).

Each stage publishes one `BatchMetrics` per micro-batch on its own metrics topic
(`names.stage_metrics_topic`). One batch of one stage is one monitoring sample:

- time: when the batch ended (`wall_time`);
- latency γ_i: the stage's own time in the batch (`stage_ms`: its Spark job, all its channels),
  not its probes' latency, which includes the stages before it in the same batch; a record
  without it (an older esp, or a one-stage stream) falls back on the batch's duration;
- rows in D_in(w) and rows out: the stage's input records and its operator's output rows, whose
  ratio is the selectivity of Eq. 10;
- rows queued out q_out(w): 0. Within a micro-batch a stage's output is consumed by the next
  stage in the same batch; what waits is the stream's Kafka lag, in front of the first stage.

`read_stage_monitorings` reads them from Kafka; the rest is pure, for the tests and the benchmark.
"""

from __future__ import annotations

from collections.abc import Sequence

from elasticity.control.asstream import StageMonitoring, StageSample, Topology
from pipelines.settings import KafkaConnection
from pipelines.streams.metrics import BatchMetrics
from pipelines.streams.names import stage_metrics_topic


def own_seconds(metrics: BatchMetrics) -> float:
    """A stage's own time in a batch: its Spark job's, or the batch's when the record has none."""
    return (metrics.stage_ms if metrics.stage_ms is not None else metrics.batch_ms) / 1000.0


def stage_sample(metrics: BatchMetrics) -> StageSample:
    """One batch of one stage as an As-Stream monitoring sample (see the module docstring)."""
    return StageSample(
        time_s=metrics.wall_time,
        mean_latency_s=own_seconds(metrics),
        rows_in=float(metrics.input_records),
        rows_out=float(metrics.output_rows or 0),
        rows_queued_out=0.0,
    )


def stage_monitoring(stage: str, records: Sequence[BatchMetrics]) -> StageMonitoring:
    """A stage's batches, in time order, as its monitoring samples; records of another stage are
    refused (a topic read by mistake would mix two stages' figures)."""
    if strays := sorted({m.stage for m in records} - {stage}):
        raise ValueError(f"metrics of stage(s) {strays} given as stage {stage!r}'s")
    ordered = sorted(records, key=lambda m: (m.wall_time, m.batch_id))
    return StageMonitoring.of(stage, (stage_sample(m) for m in ordered))


def chain_topology(stages: Sequence[str]) -> Topology:
    """A job's stages as As-Stream's topology: each feeds the next, within the batch (unbounded links)."""
    return Topology.chain(*stages)


def read_stage_monitorings(
    bootstrap: KafkaConnection | str, stream: str, stages: Sequence[str], limit: int = 120
) -> list[StageMonitoring]:
    """Each stage's last `limit` batches from its metrics topic, as monitorings, in the stages' order."""
    from pipelines.streams.metrics import read_recent

    return [
        stage_monitoring(stage, read_recent(bootstrap, stage_metrics_topic(stream, stage), limit=limit))
        for stage in stages
    ]
