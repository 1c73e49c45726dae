"""The soak's topics: each read as it is written (the ledger of what a stream was given), and
their retention limited for an endurance run.

The soak's oracle is the input topic itself. Read back at the end, it would miss whatever the
topic's retention deleted meanwhile, so an endurance run (topics with a short retention, to show
the broker's log stays bounded) reads every topic it checks from its first offset while the run
goes on, handing each record to a callback. Records deleted before the tail read them would
make the oracle wrong, so a gap in a partition's offsets is counted (`skipped`) and reported,
never papered over.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

# A ConsumerRecord of kafka-python: topic, partition, offset, key, value.
Record = Any


class TopicTail:
    """One topic, read from its beginning by a background thread until `stop()`."""

    def __init__(self, bootstrap: str, topic: str, on_record: Callable[[Record], None]) -> None:
        self.bootstrap, self.topic, self.on_record = bootstrap, topic, on_record
        self.next_offset: dict[int, int] = {}  # partition -> the offset expected next
        self.skipped = 0
        self.failure: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tail-{topic}", daemon=True)

    def start(self) -> TopicTail:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def caught_up_with(self, end: dict[int, int]) -> bool:
        with self._lock:
            return all(self.next_offset.get(p, 0) >= offset for p, offset in end.items())

    def drain(self, end: dict[int, int], timeout_s: float = 600) -> None:
        """Wait until every partition was read up to `end` (the end offsets when asked)."""
        deadline = time.monotonic() + timeout_s
        while not self.caught_up_with(end):
            if self.failure is not None:
                raise RuntimeError(f"the tail of {self.topic} failed: {self.failure!r}") from self.failure
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not read {self.topic} up to {end} within {timeout_s:.0f} s")
            time.sleep(0.5)

    def _run(self) -> None:
        try:
            self._consume()
        except BaseException as error:  # kept for drain() to raise in the soak's thread
            self.failure = error

    def _consume(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        try:
            partitions: list[TopicPartition] = []
            while not partitions and not self._stop.is_set():
                partitions = [
                    TopicPartition(self.topic, p) for p in sorted(consumer.partitions_for_topic(self.topic) or [])
                ]
                if not partitions:
                    self._stop.wait(1.0)
            consumer.assign(partitions)
            consumer.seek_to_beginning(*partitions)
            while not self._stop.is_set():
                for batch in consumer.poll(timeout_ms=1000).values():
                    for record in batch:
                        self._take(record)
        finally:
            consumer.close()

    def _take(self, record: Record) -> None:
        expected = self.next_offset.get(record.partition, 0)
        if record.offset < expected:  # a re-fetch after a reconnect
            return
        # The producers write no transactions, so offsets are dense: a jump is records deleted
        # by retention before this tail read them.
        self.skipped += record.offset - expected
        self.on_record(record)
        with self._lock:
            self.next_offset[record.partition] = record.offset + 1


def limit_retention(bootstrap: str, retention_s: float) -> list[str]:
    """Give every topic on the (soak's own) broker a retention of `retention_s`, in segments of a
    fifth of it (the broker deletes whole closed segments only); the topics changed."""
    from kafka.admin import ConfigResource, ConfigResourceType

    from pipelines.kafka_topics import admin_client, topic_partition_counts

    retention_ms = int(retention_s * 1000)
    configs = {"retention.ms": str(retention_ms), "segment.ms": str(max(10_000, retention_ms // 5))}
    topics = sorted(topic_partition_counts(bootstrap))
    with admin_client(bootstrap) as admin:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, t, configs=configs) for t in topics])
    return topics
