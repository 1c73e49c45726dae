"""What differs between stream jobs: how raw records parse, what a batch gives the elastic stage
(and sets aside as late), how the stage runs, what the bronze archive and result rows look like.

Two kinds: the built-in counting jobs (word count, ad clicks), whose stage adds pre-aggregated
deltas to int64 counts, and user jobs (`pipelines.api.Job`), whose stage runs their keyed
operator (`pipelines.operator_stage`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pyspark import Accumulator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from elasticity.layout import Layout
from pipelines.api import Job, load_job
from pipelines.dead_letters import REJECT
from pipelines.elastic_stage import StageSpec, keyed_rows, probe_rows, run_stage
from pipelines.jobs import adclicks, wordcount
from pipelines.operator_stage import OperatorBatch, operator_input, run_operator_stage, split_output
from pipelines.probes import invalid_probe_check, without_valid_probes
from pipelines.streams.metrics import planned_batch_timestamp_ms
from pipelines.streams.spec import BUILT_IN_JOBS, StreamSpec
from pipelines.streams.watermark import WatermarkLog

NO_WATERMARK_MS = -(2**63)
"""The watermark before any event time was seen: no event-time timer is due."""


@dataclass
class BatchPlan:
    """One batch's stage input (counting jobs: deltas (key, n); user jobs: their good rows), its
    late rows if any, what to do once committed, and (user jobs) the batch's recorded times."""

    deltas: DataFrame
    late: DataFrame | None = None
    finish: Callable[[], None] = field(default=lambda: None)
    operator_batch: OperatorBatch | None = None


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
    """The stage's result rows (the results table's columns, with `batch_id`) and, for operators,
    the rows they rejected (channel, reason, row JSON); `source` is what both are read from
    (cached by the runner so the stage runs once)."""

    source: DataFrame
    results: DataFrame
    rejected: DataFrame | None = None


class JobLogic(Protocol):
    result_key: str
    result_key_columns: tuple[str, ...]
    """The results table's key: a key's newest row is its current value."""
    value_codec: str
    """How the stage's channel stores hold values (`StageSpec.value_codec`)."""

    def parse(self, raw: DataFrame) -> DataFrame:
        """Raw Kafka rows (probes excluded) with `reject_reason` null for good rows."""

    def plan(self, good: DataFrame, batch_id: int) -> BatchPlan:
        """The batch's input for the elastic stage."""

    def bronze(self, good: DataFrame) -> DataFrame:
        """Raw rows to archive, with a `date` (yyyy-MM-dd) column."""

    def stage(self, plan: BatchPlan, call: StageCall) -> StageOutput:
        """Run the elastic stage on the plan's input; its result rows."""


class CountingLogic:
    """The built-in jobs' stage: pre-aggregated (key, n) deltas added to int64 counts."""

    value_codec = "int64"

    def stage(self, plan: BatchPlan, call: StageCall) -> StageOutput:
        out = run_stage(
            keyed_rows(plan.deltas).unionByName(probe_rows(call.raw)).coalesce(call.routing_tasks),
            call.layout,
            call.labels,
            call.stage,
            call.batch_id,
            call.previous_channels,
            call.reports,
        )
        rows = out.select(
            F.col("key"), F.col("value").alias("count"), F.col("channel"), F.lit(call.batch_id).alias("batch_id")
        )
        results = self.result_columns(rows)
        return StageOutput(results, results)

    def result_columns(self, results: DataFrame) -> DataFrame:
        """(key, count, channel, batch_id) → the result table's columns."""
        raise NotImplementedError


class WordCountLogic(CountingLogic):
    result_key = "word"
    result_key_columns = ("word",)

    def parse(self, raw: DataFrame) -> DataFrame:
        return wordcount.parse_lines(raw)

    def plan(self, good: DataFrame, batch_id: int) -> BatchPlan:
        return BatchPlan(wordcount.word_deltas(good).select(F.col("word").alias("key"), F.col("n")))

    def bronze(self, good: DataFrame) -> DataFrame:
        return good.select(
            "line", "topic", "partition", "offset", "timestamp", F.date_format("timestamp", "yyyy-MM-dd").alias("date")
        )

    def result_columns(self, results: DataFrame) -> DataFrame:
        return results.withColumnRenamed("key", "word")


class AdClicksLogic(CountingLogic):
    result_key = "campaign_id"
    result_key_columns = ("campaign_id", "window_start")

    def __init__(self, spec: StreamSpec) -> None:
        self.window_seconds = spec.window_seconds
        self.bounds = adclicks.EventTimeBounds.of(spec)
        self.watermarks = WatermarkLog(f"{spec.control_dir}/watermark", spec.watermark_seconds * 1000)

    def parse(self, raw: DataFrame) -> DataFrame:
        return adclicks.parse_events(raw, self.bounds)

    def plan(self, good: DataFrame, batch_id: int) -> BatchPlan:
        watermark = self.watermarks.watermark_for(batch_id)
        on_time, late = adclicks.split_late(adclicks.view_window_counts(good, self.window_seconds), watermark)

        def finish() -> None:
            max_event = good.agg(F.max("event_time").alias("m")).first().m
            self.watermarks.record(batch_id, watermark, max_event)

        return BatchPlan(adclicks.state_key(on_time), late, finish)

    def bronze(self, good: DataFrame) -> DataFrame:
        columns = [*adclicks.STRING_FIELDS, "event_time", "topic", "partition", "offset", "timestamp"]
        return good.select(*columns, F.date_format(F.timestamp_millis("event_time"), "yyyy-MM-dd").alias("date"))

    def result_columns(self, results: DataFrame) -> DataFrame:
        return adclicks.result_columns(results, self.window_seconds)


class OperatorJobLogic:
    """A user's `Job`: its parser (plus esp's checks), its operator on the elastic stage."""

    value_codec = "bytes"

    def __init__(self, spec: StreamSpec, job: Job) -> None:
        self.job = job
        self.checkpoint = spec.checkpoint
        self.result_key = job.result_key
        self.result_key_columns = job.result_key_columns
        self.watermarks = WatermarkLog(f"{spec.control_dir}/watermark", job.allowed_lateness_ms)

    def parse(self, raw: DataFrame) -> DataFrame:
        parsed = self.job.parse(without_valid_probes(raw))
        key_column = self.job.operator.key_column
        needed = (REJECT, "value", "topic", "partition", "offset", key_column)
        if missing := [c for c in needed if c not in parsed.columns]:
            raise ValueError(
                f"the job's parse returned no {missing} column(s): it keeps the Kafka columns and adds the "
                f"operator's key column and {REJECT!r}"
            )
        probe, probe_reason = invalid_probe_check()
        esp_reason = F.when(probe, F.lit(probe_reason.value)).when(
            F.col(REJECT).isNull() & F.col(key_column).isNull(), F.lit(f"missing key: {key_column} is null")
        )
        return parsed.withColumn(REJECT, F.coalesce(esp_reason, F.col(REJECT)))

    def plan(self, good: DataFrame, batch_id: int) -> BatchPlan:
        rows = good.drop(*self._hidden_columns(good))
        processing_ms = planned_batch_timestamp_ms(self.checkpoint, batch_id)
        if processing_ms is None:
            raise RuntimeError(f"batch {batch_id} has no entry in the offsets log of {self.checkpoint}")
        column = self.job.event_time_column
        if column is None:
            return BatchPlan(rows, operator_batch=OperatorBatch(batch_id, NO_WATERMARK_MS, processing_ms))
        watermark = self.watermarks.watermark_for(batch_id)

        def finish() -> None:
            max_event = good.agg(F.max(column).alias("m")).first().m
            self.watermarks.record(batch_id, watermark, max_event)

        times = OperatorBatch(batch_id, NO_WATERMARK_MS if watermark is None else watermark, processing_ms)
        return BatchPlan(rows, finish=finish, operator_batch=times)

    def _hidden_columns(self, good: DataFrame) -> list[str]:
        """Columns the operator does not see (see `pipelines.api.KAFKA_COLUMNS`)."""
        hidden = ["value", "timestampType", REJECT]
        if self.job.operator.key_column != "key":
            hidden.append("key")
        return [c for c in hidden if c in good.columns]

    def bronze(self, good: DataFrame) -> DataFrame:
        if self.job.archive is not None:
            return self.job.archive(good)
        return good.drop(*self._hidden_columns(good)).withColumn("date", F.date_format("timestamp", "yyyy-MM-dd"))

    def stage(self, plan: BatchPlan, call: StageCall) -> StageOutput:
        if plan.operator_batch is None:
            raise ValueError("a user job's batch plan carries its recorded times")
        key_column = self.job.operator.key_column
        out = run_operator_stage(
            operator_input(plan.deltas, call.raw, key_column).coalesce(call.routing_tasks),
            self.job.operator,
            call.layout,
            call.labels,
            call.stage,
            plan.operator_batch,
            call.previous_channels,
            call.reports,
        )
        results, rejected = split_output(out, self.job.operator)
        return StageOutput(out, results.withColumn("batch_id", F.lit(call.batch_id)), rejected)


def job_logic(spec: StreamSpec) -> JobLogic:
    if spec.job == "wordcount":
        return WordCountLogic()
    if spec.job == "adclicks":
        return AdClicksLogic(spec)
    if spec.job in BUILT_IN_JOBS:
        raise ValueError(f"built-in job {spec.job!r} has no logic")
    return OperatorJobLogic(spec, load_job(spec.job))
