"""Reading the word-count stream's results back in tests: the latest count of every word."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from pipelines.streams.results import latest_rows


def latest_word_counts(spark: SparkSession, results_table: str) -> dict[str, int]:
    """word -> its newest count; empty when the stream has written no batch yet."""
    if not Path(results_table).exists() or not any(Path(results_table).glob("batch_id=*")):
        return {}
    return {r.word: r["count"] for r in latest_rows(spark, results_table, ["word"]).collect()}
