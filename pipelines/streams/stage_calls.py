"""What one batch's elastic stage is called with besides its rows (`jobs.StageCall`): the layout's
placement labels, the channels of the layout before it (a worker keeps a store it cached under
that layout only for those), the accumulator the stage's tasks report into, and how many tasks route the input.
Then, once the stage ran, the batch's own channel reports from that accumulator."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark import Accumulator
from pyspark.sql import DataFrame, SparkSession

from elasticity.layout import Layout
from elasticity.migration.registry import LayoutRegistry
from pipelines.elastic_stage import ChannelReports, ReportKey, StageSpec, placement_labels
from pipelines.streams.jobs import StageCall
from pipelines.streams.metrics import ChannelMetrics
from pipelines.streams.spec import StreamSpec


@dataclass
class StageCalls:
    """One stream's stage calls, batch after batch (they run one at a time)."""

    spark: SparkSession
    spec: StreamSpec
    registry: LayoutRegistry
    _labels: dict[int, list[int]] = field(default_factory=dict)
    _reports: Accumulator[dict[ReportKey, ChannelMetrics]] | None = None

    def call(self, raw: DataFrame, layout: Layout, stage: StageSpec, batch_id: int) -> StageCall:
        """The call of batch `batch_id` under `layout` (the one it routes by: the committed one)."""
        reports = self._channel_reports()
        return StageCall(
            raw=raw,
            layout=layout,
            labels=self._labels_for(layout.n_channels),
            stage=stage,
            batch_id=batch_id,
            previous_channels=self._previous_channels(layout),
            reports=reports,
            routing_tasks=self.spec.routing_tasks or self.spark.sparkContext.defaultParallelism,
        )

    @staticmethod
    def reports_of(call: StageCall) -> list[ChannelMetrics]:
        """The channel reports of the call's batch, by channel: read once the stage's rows were
        computed (the tasks add them as they run)."""
        return [r for (b, _), r in sorted(call.reports.value.items()) if b == call.batch_id]

    def _channel_reports(self) -> Accumulator[dict[ReportKey, ChannelMetrics]]:
        """The stream's accumulator of channel reports, emptied for the next batch (batches
        run one at a time, so one accumulator serves them all)."""
        if self._reports is None:
            self._reports = self.spark.sparkContext.accumulator({}, ChannelReports())
        else:
            self._reports.value = {}
        return self._reports

    def _labels_for(self, n: int) -> list[int]:
        if n not in self._labels:
            self._labels[n] = placement_labels(n)
        return self._labels[n]

    def _previous_channels(self, layout: Layout) -> list[int]:
        # `layout` is the committed one (the batch routes by it), so its predecessor is the registry's.
        previous = self.registry.previous()
        return list(previous.channels) if previous is not None else []
