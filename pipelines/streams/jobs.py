"""What differs between stream jobs: how raw records parse, which keyed deltas a batch
produces (and which it sets aside as late), what the bronze archive and result rows look like."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.jobs import adclicks, wordcount
from pipelines.streams.spec import StreamSpec
from pipelines.streams.watermark import WatermarkLog


@dataclass
class BatchPlan:
    """One batch's keyed deltas (key, n), its late rows if any, and what to do once committed."""

    deltas: DataFrame
    late: DataFrame | None = None
    finish: Callable[[], None] = field(default=lambda: None)


class JobLogic(Protocol):
    result_key: str
    result_key_columns: tuple[str, ...]
    """The results table's key: a key's newest row is its current value."""

    def parse(self, raw: DataFrame) -> DataFrame:
        """Raw Kafka rows (probes excluded) with `reject_reason` null for good rows."""

    def plan(self, good: DataFrame, batch_id: int) -> BatchPlan:
        """The batch's increments for the elastic stage."""

    def bronze(self, good: DataFrame) -> DataFrame:
        """Raw rows to archive, with a `date` (yyyy-MM-dd) column."""

    def result_columns(self, results: DataFrame) -> DataFrame:
        """(key, count, channel, batch_id) → the result table's columns."""


class WordCountLogic:
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


class AdClicksLogic:
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


def job_logic(spec: StreamSpec) -> JobLogic:
    if spec.job == "wordcount":
        return WordCountLogic()
    if spec.job == "adclicks":
        return AdClicksLogic(spec)
    raise ValueError(f"unknown job {spec.job!r}")
