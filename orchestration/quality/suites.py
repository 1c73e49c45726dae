"""The expectation suites, as plain lists of GX 1.x expectations, and the frames they validate.

- results: the latest view of a results table (every row written by a key's newest batch);
  keys and counts not null, counts non-negative, no duplicate key (key, window) rows, and for
  windowed pipelines windows aligned to the window length;
- dead letters: the records of the dead-letter topic in a look-back window, at most a threshold;
- state: the census of the elastic stage after a rescale; every key routed to the channel that
  stores it, stored once, with the stored hash equal to the key's hash, and (when a baseline is
  known) the number of keys and the sum of counts equal to it.
"""

from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from orchestration.quality.gx_validation import import_gx
from pipelines.batch.pipelines import BatchPipeline

WINDOW_OFFSET = "window_offset_ms"
WINDOW_LENGTH = "window_length_s"


def latest_view(spark: SparkSession, results_table: str, keys: list[str]) -> DataFrame:
    """Every row written by its key's newest batch. Unlike `latest_rows`, which keeps one row
    per key, duplicates survive here, so the suite can see them."""
    table = spark.read.parquet(results_table)
    newest = F.max("batch_id").over(Window.partitionBy(*keys))
    return table.withColumn("_newest", newest).where(F.col("batch_id") == F.col("_newest")).drop("_newest")


def with_window_checks(frame: DataFrame, pipeline: BatchPipeline, window_seconds: int) -> DataFrame:
    """Add each row's window misalignment (ms past a window boundary) and window length (s)."""
    if pipeline.window_columns is None:
        return frame
    start, end = pipeline.window_columns
    size_ms = window_seconds * 1000
    return frame.withColumn(WINDOW_OFFSET, F.pmod(F.unix_millis(start), F.lit(size_ms))).withColumn(
        WINDOW_LENGTH, F.unix_seconds(end) - F.unix_seconds(start)
    )


def results_expectations(pipeline: BatchPipeline, window_seconds: int) -> list[Any]:
    gxe = import_gx().expectations

    keys = list(pipeline.key_columns)
    expectations: list[Any] = [gxe.ExpectColumnValuesToNotBeNull(column=c) for c in [*keys, "count", "batch_id"]]
    expectations.append(gxe.ExpectColumnValuesToBeBetween(column="count", min_value=0))
    if len(keys) == 1:
        expectations.append(gxe.ExpectColumnValuesToBeUnique(column=keys[0]))
    else:
        expectations.append(gxe.ExpectCompoundColumnsToBeUnique(column_list=keys))
    if pipeline.window_columns is not None:
        expectations.append(gxe.ExpectColumnValuesToBeInSet(column=WINDOW_OFFSET, value_set=[0]))
        expectations.append(gxe.ExpectColumnValuesToBeInSet(column=WINDOW_LENGTH, value_set=[window_seconds]))
    return expectations


def dead_letter_expectations(max_records: int) -> list[Any]:
    gxe = import_gx().expectations

    return [
        gxe.ExpectTableRowCountToBeBetween(min_value=0, max_value=max_records),
        gxe.ExpectColumnValuesToNotBeNull(column="reason"),
    ]


def state_expectations(baseline_keys: int | None, baseline_total: int | None) -> list[Any]:
    gxe = import_gx().expectations

    expectations: list[Any] = [
        gxe.ExpectColumnPairValuesToBeEqual(column_A="channel", column_B="routed_channel"),
        gxe.ExpectColumnPairValuesToBeEqual(column_A="stored_hash", column_B="key_hash"),
        gxe.ExpectColumnValuesToBeUnique(column="key"),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0),
    ]
    if baseline_keys is not None:
        expectations.append(gxe.ExpectTableRowCountToEqual(value=baseline_keys))
    if baseline_total is not None:
        expectations.append(
            gxe.ExpectColumnSumToBeBetween(column="value", min_value=baseline_total, max_value=baseline_total)
        )
    return expectations
