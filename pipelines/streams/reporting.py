"""A micro-batch's report: what the runner measures while the batch runs (`BatchContext`), the
`BatchMetrics` made of it and the channels' reports once the batch is done, and the stream's
producer that publishes them to its metrics topic (`MetricsOutlet`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from elasticity.layout import Layout
from pipelines.streams.control import RescaleResult
from pipelines.streams.metrics import BatchMetrics, ChannelMetrics
from pipelines.streams.metrics_publisher import MetricsPublisher
from pipelines.streams.names import FIRST_STAGE, stage_metrics_topic
from pipelines.streams.spec import StreamSpec


@dataclass
class BatchContext:
    """One running batch: its id, its start (`time.perf_counter`), the layout it routes by, the
    rescale applied at its start, and its phases' durations so far."""

    batch_id: int
    started: float
    layout: Layout
    rescale: RescaleResult | None = None
    phase_ms: dict[str, float] = field(default_factory=dict)


def batch_metrics(
    stream: str, context: BatchContext, reports: list[ChannelMetrics], rejected: int, stage: str = FIRST_STAGE
) -> BatchMetrics:
    """The batch's metrics of one elastic stage, timed now; a channel of the layout that sent no
    report (no records routed to it) counts as an empty one."""
    per_channel = {c: ChannelMetrics(channel=c) for c in context.layout.channels}
    per_channel.update({report.channel: report for report in reports})
    elapsed = time.perf_counter() - context.started
    records = sum(c.records for c in per_channel.values())
    return BatchMetrics(
        stream=stream,
        batch_id=context.batch_id,
        epoch=context.layout.epoch,
        channels=context.layout.n_channels,
        wall_time=time.time(),
        input_records=records,
        rejected_records=rejected,
        batch_ms=elapsed * 1000,
        records_per_s=records / elapsed if elapsed > 0 else 0.0,
        per_channel=list(per_channel.values()),
        rescale=context.rescale.model_dump(mode="json") if context.rescale is not None else None,
        stage=stage,
        output_rows=sum(c.output_rows for c in per_channel.values()),
    )


class MetricsOutlet:
    """A stage's metrics producer: made at the first batch it publishes, closed at the stream's stop
    (a later batch makes a new one). The first stage's go to the stream's metrics topic."""

    def __init__(self, spec: StreamSpec, stage: str = FIRST_STAGE) -> None:
        self._spec = spec
        self._topic = stage_metrics_topic(spec.name, stage)
        self._publisher: MetricsPublisher | None = None

    def publish(self, metrics: BatchMetrics) -> None:
        if self._publisher is None:
            self._publisher = MetricsPublisher(self._spec.kafka, self._topic, self._spec.name.encode())
        self._publisher.publish(metrics)  # a broker outage drops metrics, never the batch

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None
