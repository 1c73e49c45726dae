"""How a stream runs its job (`pipelines.api.Job`): records parsed, with esp's own checks; a batch's
input for the elastic stage prepared under the batch's recorded times; the operator run on the
stage; result rows shaped for the results table. The built-in word count and ad clicks are jobs
like any user's (`pipelines.jobs`); a user job is named by its `module:function`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark import Accumulator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from elasticity.layout import Layout
from pipelines.api import Job, Prepared, load_job
from pipelines.column_cache import once_per_jvm
from pipelines.dead_letters import REJECT
from pipelines.elastic_stage import StageSpec
from pipelines.jobs.adclicks import adclicks_job
from pipelines.jobs.wordcount import wordcount_job
from pipelines.operator_stage import (
    CHANNEL_COLUMN,
    NO_WATERMARK_MS,
    OperatorBatch,
    operator_input,
    output_rows,
    rejected_rows,
    run_operator_stage,
)
from pipelines.probes import invalid_probe_check, without_valid_probes
from pipelines.streams.metrics import ChannelMetrics, planned_batch_timestamp_ms
from pipelines.streams.names import FIRST_STAGE
from pipelines.streams.spec import StreamSpec
from pipelines.streams.watermark import WatermarkLog


@dataclass
class BatchPlan:
    """One batch's input for the stage, its late rows if any, what to do once it committed, and its
    recorded times."""

    rows: DataFrame
    times: OperatorBatch
    late: DataFrame | None = None
    finish: Callable[[], None] = field(default=lambda: None)


@dataclass(frozen=True)
class StageCall:
    """What one batch's elastic stage needs besides its input rows."""

    raw: DataFrame
    layout: Layout
    labels: list[int]
    stage: StageSpec
    batch_id: int
    previous_channels: list[int]
    reports: Accumulator
    routing_tasks: int


@dataclass(frozen=True)
class StageOutput:
    """A stage's result rows (for the last stage, the results table's columns, with `batch_id`; for
    an earlier one, its operator's output columns) and `source`, what they are read from."""

    source: DataFrame
    results: DataFrame

    def rejected(self) -> DataFrame:
        """The rows the stage's operator rejected (channel, reason, row JSON): built only for a
        batch where some were, since each DataFrame step is analysed on the driver in every batch."""
        return rejected_rows(self.source)


@dataclass
class StageRun:
    """One stage's part of a batch: its call, its output, and (once computed) its channels' reports."""

    call: StageCall
    output: StageOutput
    reports: list[ChannelMetrics] = field(default_factory=list)
    wall_ms: float | None = None
    """The wall time of the Spark job that computed the stage (None: not timed apart)."""

    @property
    def rejected_records(self) -> int:
        return sum(r.rejected_records for r in self.reports)


class JobLogic:
    """A stream's `Job`, run under esp's rules (checks, recorded times, watermark)."""

    def __init__(self, spec: StreamSpec, job: Job) -> None:
        self.job = job
        self.checkpoint = spec.checkpoint
        self.result_key = job.result_key
        self.result_key_columns = job.result_key_columns
        self.watermarks = WatermarkLog(f"{spec.control_dir}/watermark", job.allowed_lateness_ms)

    def parse(self, raw: DataFrame) -> DataFrame:
        """Raw Kafka rows (probes excluded) with `reject_reason` null for good rows."""
        parsed = self.job.parse(without_valid_probes(raw))
        # With `prepare`, the operator's key is made later: only the parser's own columns are known.
        key_column = self.job.operator.key_column if self.job.prepare is None else None
        needed = [REJECT, "value", "topic", "partition", "offset", *([key_column] if key_column else [])]
        columns = set(parsed.columns)
        if missing := [c for c in needed if c not in columns]:
            raise ValueError(
                f"the job's parse returned no {missing} column(s): it keeps the Kafka columns and adds "
                f"{REJECT!r} (and the operator's key column unless the job prepares its input)"
            )
        return parsed.withColumn(REJECT, _reject_reason(key_column))

    def plan(self, good: DataFrame, batch_id: int) -> BatchPlan:
        """The batch's input for the stage under its recorded processing time and watermark."""
        processing_ms = planned_batch_timestamp_ms(self.checkpoint, batch_id)
        if processing_ms is None:
            raise RuntimeError(f"batch {batch_id} has no entry in the offsets log of {self.checkpoint}")
        column = self.job.event_time_column
        watermark = self.watermarks.watermark_for(batch_id) if column is not None else None
        times = OperatorBatch(batch_id, NO_WATERMARK_MS if watermark is None else watermark, processing_ms)
        rows = good.drop(*self._hidden_columns(good))
        prepared = self.job.prepare(rows, times) if self.job.prepare is not None else Prepared(rows)
        if column is None:
            return BatchPlan(prepared.rows, times, prepared.late)

        def finish() -> None:
            max_event = good.agg(F.max(column).alias("m")).first().m
            self.watermarks.record(batch_id, watermark, max_event)

        return BatchPlan(prepared.rows, times, prepared.late, finish)

    def _hidden_columns(self, good: DataFrame) -> list[str]:
        """Columns the operator does not see (see `pipelines.api.KAFKA_COLUMNS`)."""
        hidden = ["value", "timestampType", REJECT]
        if self.job.operator.key_column != "key":
            hidden.append("key")
        columns = set(good.columns)
        return [c for c in hidden if c in columns]

    def bronze(self, good: DataFrame) -> DataFrame:
        """Rows to archive, with a `date` (yyyy-MM-dd) column."""
        if self.job.archive is not None:
            return self.job.archive(good)
        return good.drop(*self._hidden_columns(good)).withColumn("date", F.date_format("timestamp", "yyyy-MM-dd"))

    def stage_channels(self) -> list[tuple[str, int | None]]:
        """Each elastic stage's name and its channels at first start (None: the stream's)."""
        return [(FIRST_STAGE, None), *((stage.name, stage.channels) for stage in self.job.stages)]

    def run_stage(self, index: int, plan: BatchPlan, call: StageCall, previous: StageOutput | None) -> StageRun:
        """Run elastic stage `index` of the job: the first on the plan's rows, a later one on the
        previous stage's output rows, re-keyed by the stage's `rekey`. Only the last stage's rows
        are shaped by the job's `results`."""
        if index == 0:
            operator, weight_column, rows = self.job.operator, self.job.weight_column, plan.rows
        else:
            if previous is None:
                raise ValueError(f"stage {index} needs the output of stage {index - 1}")
            stage = self.job.stages[index - 1]
            operator, weight_column = stage.operator, stage.weight_column
            upstream = previous.results.drop(CHANNEL_COLUMN)
            rows = stage.rekey(upstream) if stage.rekey is not None else upstream
        name = FIRST_STAGE if index == 0 else self.job.stages[index - 1].name
        stage_input = operator_input(rows, call.raw, operator.key_column, name)
        # The first stage's input (Kafka's partitions) is routed by as many tasks as there are
        # cores. A later stage's is not coalesced: its rows come from the previous stage's tasks,
        # which a coalesce would run several to a task (see `_operator_task`).
        out = run_operator_stage(
            stage_input.coalesce(call.routing_tasks) if index == 0 else stage_input,
            operator,
            call.layout,
            call.labels,
            call.stage,
            plan.times,
            call.previous_channels,
            call.reports,
            weight_column,
        )
        if index < len(self.job.stages):
            return StageRun(call, StageOutput(out, output_rows(out, operator)))
        results = output_rows(out, operator, call.batch_id)
        shaped = self.job.results(results) if self.job.results is not None else results
        return StageRun(call, StageOutput(out, shaped))


@once_per_jvm
def _reject_reason(key_column: str | None) -> Column:
    """The parser's reject reason, or esp's own: an invalid probe, a missing key (`key_column`)."""
    probe, probe_reason = invalid_probe_check()
    esp_reason = F.when(probe, F.lit(probe_reason.value))
    if key_column is not None:
        esp_reason = esp_reason.when(
            F.col(REJECT).isNull() & F.col(key_column).isNull(), F.lit(f"missing key: {key_column} is null")
        )
    return F.coalesce(esp_reason, F.col(REJECT))


def job_of(spec: StreamSpec) -> Job:
    """The stream's job: a built-in one, or the user's `module:function`."""
    if spec.job == "wordcount":
        return wordcount_job()
    if spec.job == "adclicks":
        return adclicks_job(spec)
    return load_job(spec.job)


def job_logic(spec: StreamSpec) -> JobLogic:
    return JobLogic(spec, job_of(spec))
