"""The elastic word count on the real broker and Spark equals the batch oracle; malformed lines
go to the dead-letter topic with their reason while the stream keeps running."""

from __future__ import annotations

import json

import pytest

from tests.integration.streams import produce, wait_for_checkpoint

pytestmark = pytest.mark.integration


def test_elastic_word_count_equals_the_batch_oracle(spark, bootstrap, topic_factory, tmp_path):
    from pipelines import kafka_io
    from pipelines.jobs.wordcount import batch_oracle
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec
    from tests.results import latest_word_counts

    topic = topic_factory("words", partitions=4)
    lines = [" ".join(f"w{(i * 7 + j) % 97}" for j in range(i % 5 + 1)) for i in range(3000)]
    malformed = [b"", b"   \t ", b"\xc3\x28 broken utf8", b"w1 " * 400_000]
    produce(bootstrap, topic, lines + malformed)
    spec = StreamSpec(
        name="wc",
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(tmp_path / "wc"),
        channels=3,
        trigger_seconds=0.5,
    )
    stream = ElasticStream(spark, spec)
    stream.start()
    try:
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap)
        produce(bootstrap, topic, lines[:500])
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap)
    finally:
        stream.stop()

    expected = batch_oracle(kafka_io.read_batch(spark, bootstrap, topic))
    assert latest_word_counts(spark, spec.results_table) == expected
    assert native_word_counts(spark, bootstrap, topic, tmp_path / "native") == expected
    assert stream.last_metrics is not None and stream.last_metrics.channels == 3
    letters = [json.loads(r.value) for r in _consume(bootstrap, spec.dead_letter_topic)]
    reasons = sorted(letter["reason"] for letter in letters)
    assert reasons == sorted(
        ["empty line", "empty line", "value is not valid UTF-8", "value larger than 1000000 bytes"]
    ), letters


def native_word_counts(spark, bootstrap: str, topic: str, folder) -> dict[str, int]:
    """The same input through Spark's own stateful groupBy().count() (RocksDB state store)."""
    from pipelines import kafka_io
    from pipelines.jobs.wordcount import native_counts

    query = (
        native_counts(kafka_io.read_stream(spark, bootstrap, topic))
        .writeStream.format("memory")
        .queryName("native_wc")
        .outputMode("complete")
        .option("checkpointLocation", str(folder / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    try:
        return {r.word: r["count"] for r in spark.table("native_wc").collect()}
    finally:
        spark.catalog.dropTempView("native_wc")


def _consume(bootstrap: str, topic: str) -> list:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000)
    try:
        return list(consumer)
    finally:
        consumer.close()
