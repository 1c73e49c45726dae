"""Spark's native Kafka source and sink, configured one way for every esp job.

Each takes a KafkaConnection (address + SASL/TLS settings) or a bare address, which means PLAINTEXT.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.settings import KafkaConnection, kafka_connection

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")

# Spark reads fixed offset ranges, so a broker-side wait for more data only delays the task:
# with the consumer's default (500 ms) each small read task sat ~0.5 s idle at its range end.
FETCH_MAX_WAIT_MS = "10"


def read_stream(
    spark: SparkSession, bootstrap: KafkaConnection | str, topic: str, max_offsets_per_trigger: int | None = None
) -> DataFrame:
    """A streaming DataFrame over one topic, from the earliest offset on first start."""
    reader = (
        spark.readStream.format("kafka")
        .options(**kafka_connection(bootstrap).spark_options())
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .option("kafka.fetch.max.wait.ms", FETCH_MAX_WAIT_MS)
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load().select(*KAFKA_COLUMNS)


def read_batch(spark: SparkSession, bootstrap: KafkaConnection | str, topic: str) -> DataFrame:
    """Everything currently in a topic, as a batch DataFrame (for oracles and backfills)."""
    return (
        spark.read.format("kafka")
        .options(**kafka_connection(bootstrap).spark_options())
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("kafka.fetch.max.wait.ms", FETCH_MAX_WAIT_MS)
        .load()
        .select(*KAFKA_COLUMNS)
    )


def write_batch(df: DataFrame, bootstrap: KafkaConnection | str, topic: str, key: Column, value: Column) -> None:
    """Write a batch DataFrame to a topic (at-least-once: a replayed batch writes again)."""
    (
        df.select(key.cast("binary").alias("key"), value.cast("binary").alias("value"))
        .write.format("kafka")
        .options(**kafka_connection(bootstrap).spark_options())
        .option("topic", topic)
        .save()
    )


def source_position() -> Column:
    """topic/partition/offset of a record: a stable id for dedup downstream."""
    return F.concat_ws(":", F.col("topic"), F.col("partition").cast("string"), F.col("offset").cast("string"))
