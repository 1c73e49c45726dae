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


def test_the_recent_window_ends_when_the_end_offsets_are_read_not_at_the_ticks_clock(
    bootstrap, topic_factory, tmp_path
):
    # A tick reads its clock, then the metrics topic, then connects a consumer and reads the end
    # offsets: on the elasticity bench ~0.25 s later, so a window counted from the clock took in
    # 2.75 s of input as 2.5 (865-912 rec/s at a steady 800). Here the clock is read 1 s early.
    from kafka import KafkaProducer

    from orchestration.elasticity.collector import KafkaStreamSource
    from pipelines.streams.spec import StreamSpec

    topic = topic_factory("arrivals-late", partitions=1)
    now_ms = int(time.time() * 1000)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for stamped_ms in [now_ms - 3_200] * 10 + [now_ms - 500] * 10:  # before the window, within it
        producer.send(topic, b"line", partition=0, timestamp_ms=stamped_ms)
    producer.flush()
    producer.close()
    spec = StreamSpec.model_validate(
        {"name": "late", "input_topic": topic, "bootstrap_servers": bootstrap, "root": str(tmp_path / "late")}
    )

    reading = KafkaStreamSource(spec, arrival_window_s=2.5).read(now_ms / 1000 - 1.0)

    assert reading.arrivals is not None and reading.end_offsets == {0: 20}
    assert reading.arrivals.offsets_per_second(reading.end_offsets) == pytest.approx(10 / 2.5)
