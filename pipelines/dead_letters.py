"""Malformed records go to a dead-letter topic with the reason, never silently away.

A parser returns the input with a `reject_reason` column (null for good records). Rejected rows
are written to `<stream>.dlq` as JSON: reason, source position and the original value, cut to a
size the broker accepts (the full size is reported).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from pipelines.kafka_io import source_position, write_batch

REJECT = "reject_reason"
MAX_VALUE_BYTES = 1_000_000
KEPT_VALUE_CHARS = 2_000


def first_reason(*checks: tuple[Column, str]) -> Column:
    """The message of the first check that holds, else null."""
    expr = F.lit(None).cast("string")
    for condition, message in reversed(checks):
        expr = F.when(condition, F.lit(message)).otherwise(expr)
    return expr


def basic_value_checks(value: Column) -> list[tuple[Column, str]]:
    """Checks every text record passes: present, not too large, valid UTF-8."""
    return [
        (value.isNull(), "null value"),
        (F.length(value) > MAX_VALUE_BYTES, f"value larger than {MAX_VALUE_BYTES} bytes"),
        (~F.is_valid_utf8(value), "value is not valid UTF-8"),
    ]


def split_rejected(parsed: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(good rows, rejected rows) of a DataFrame carrying a `reject_reason` column."""
    return parsed.where(F.col(REJECT).isNull()), parsed.where(F.col(REJECT).isNotNull())


def split_counting_rejected(parsed: DataFrame) -> tuple[DataFrame, DataFrame, Observation]:
    """Like `split_rejected`, plus an observation that the first job over the good rows fills
    with the number of rejected ones: no count job of its own beside the batch's real work."""
    observation = Observation()
    good, _ = split_rejected(parsed.observe(observation, F.count(F.col(REJECT)).alias("rejected")))
    _, rejected = split_rejected(parsed)
    return good, rejected, observation


def rejected_count(observation: Observation, rejected: DataFrame) -> int:
    """The count a job over the good rows observed; a count job only if Spark delivered none.

    Spark 4.2 now and then completes an observation with an empty row, so the observed value is
    read from the JVM row (PySpark's `get` asserts on such a row) and checked."""
    jvm_observation = observation._jo  # noqa: SLF001 (PySpark keeps the JVM Observation private)
    if jvm_observation is not None and jvm_observation.future().isCompleted():
        row = jvm_observation.getRow()
        if row.length() == 1 and not row.isNullAt(0):
            return int(row.getLong(0))
    return rejected.count()


def write_dead_letters(rejected: DataFrame, bootstrap: str, topic: str, batch_id: int) -> None:
    """Publish rejected records as JSON to the dead-letter topic."""
    payload = F.to_json(
        F.struct(
            F.col(REJECT).alias("reason"),
            F.col("topic").alias("source_topic"),
            F.col("partition").alias("source_partition"),
            F.col("offset").alias("source_offset"),
            F.lit(batch_id).alias("batch_id"),
            F.length("value").alias("value_bytes"),
            F.substring(F.col("value").cast("string"), 1, KEPT_VALUE_CHARS).alias("value_head"),
        )
    )
    write_batch(rejected, bootstrap, topic, key=source_position(), value=payload)
