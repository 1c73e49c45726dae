"""The collector's recent-arrival reading on a real broker: offsets by record timestamp."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.integration


def test_offsets_at_a_time_split_old_records_from_recent_ones(bootstrap, topic_factory):
    from kafka import KafkaProducer

    from orchestration.elasticity.collector import RecentArrivals, input_end_offsets, input_offsets_at

    topic = topic_factory("arrivals", partitions=2)
    now_ms = int(time.time() * 1000)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for _ in range(5):  # 10 s old, partition 0 only
        producer.send(topic, b"old", partition=0, timestamp_ms=now_ms - 10_000)
    for partition, count in ((0, 3), (1, 4)):  # just now
        for _ in range(count):
            producer.send(topic, b"new", partition=partition, timestamp_ms=now_ms)
    producer.flush()
    producer.close()

    starts = input_offsets_at(bootstrap, topic, now_ms - 2_000)
    assert starts == {0: 5, 1: 0}
    ends = input_end_offsets(bootstrap, topic)
    assert RecentArrivals(2.0, starts).offsets_per_second(ends) == pytest.approx(7 / 2.0)
    # Nothing produced after the time asked: every partition starts at its end, nothing arrived.
    assert input_offsets_at(bootstrap, topic, now_ms + 60_000) == ends
    assert input_offsets_at(bootstrap, "no-such-topic-here", now_ms) == {}
