"""Reading a stream's results table back: the latest value of every key."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F


def latest_rows(spark: SparkSession, results_table: str, key_columns: list[str]) -> DataFrame:
    """One row per key: the one written by the highest batch id."""
    table = spark.read.parquet(results_table)
    newest_first = Window.partitionBy(*key_columns).orderBy(F.col("batch_id").desc())
    return table.withColumn("_rank", F.row_number().over(newest_first)).where("_rank = 1").drop("_rank")
