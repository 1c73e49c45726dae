"""What differs between stream jobs: how raw records parse, which keyed deltas they produce,
what the bronze archive and result rows look like."""

from __future__ import annotations

from typing import Protocol

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.jobs import wordcount
from pipelines.streams.spec import StreamSpec


class JobLogic(Protocol):
    result_key: str
    def parse(self, raw: DataFrame) -> DataFrame:
        """Raw Kafka rows (probes excluded) with `reject_reason` null for good rows."""

    def deltas(self, good: DataFrame) -> DataFrame:
        """(key: string, n: long) increments of this batch's good rows."""

    def bronze(self, good: DataFrame) -> DataFrame:
        """Raw rows to archive, with a `date` (yyyy-MM-dd) column."""

    def result_columns(self, results: DataFrame) -> DataFrame:
        """(key, count, channel, batch_id) → the result table's columns."""


class WordCountLogic:
    result_key = "word"

    def parse(self, raw: DataFrame) -> DataFrame:
        return wordcount.parse_lines(raw)

    def deltas(self, good: DataFrame) -> DataFrame:
        return wordcount.word_deltas(good).select(F.col("word").alias("key"), F.col("n"))

    def bronze(self, good: DataFrame) -> DataFrame:
        return good.select(
            "line", "topic", "partition", "offset", "timestamp", F.date_format("timestamp", "yyyy-MM-dd").alias("date")
        )

    def result_columns(self, results: DataFrame) -> DataFrame:
        return results.withColumnRenamed("key", "word")


def job_logic(spec: StreamSpec) -> JobLogic:
    if spec.job == "wordcount":
        return WordCountLogic()
    raise ValueError(f"unknown job {spec.job!r}")
