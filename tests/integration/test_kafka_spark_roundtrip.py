"""The foundation works end to end: kafka-python writes, Spark's native Kafka source reads back."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

RECORDS = 10_000
PARTITIONS = 4


def _produce_keyed(bootstrap: str, topic: str) -> dict[str, str]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    sent = {f"key-{i:05d}": f"value-{i * 7}" for i in range(RECORDS)}
    for key, value in sent.items():
        producer.send(topic, key=key.encode(), value=value.encode())
    producer.flush()
    producer.close()
    return sent


def _expected_partition(key: str) -> int:
    from kafka.partitioner.default import murmur2

    return (murmur2(key.encode()) & 0x7FFFFFFF) % PARTITIONS


def test_spark_batch_reads_back_what_kafka_python_wrote(spark, bootstrap, topic_factory):
    topic = topic_factory("roundtrip", partitions=PARTITIONS)
    sent = _produce_keyed(bootstrap, topic)

    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "partition")
        .collect()
    )

    assert len(rows) == RECORDS
    received = {r.k: r.v for r in rows}
    assert received == sent
    assert {r.partition for r in rows} == set(range(PARTITIONS))
    for row in rows[:: RECORDS // 200]:
        assert row.partition == _expected_partition(row.k)


def test_unknown_topic_is_named_in_the_error(bootstrap):
    from pipelines.kafka_topics import UnknownTopicError, require_topics

    with pytest.raises(UnknownTopicError, match="no-such-topic"):
        require_topics(bootstrap, ["no-such-topic"])
