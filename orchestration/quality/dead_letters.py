"""Reading a dead-letter topic's recent records: how many arrived in a look-back window, and
what they say (reason, source position). kafka-python only; no Spark needed for a DLQ."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipelines.settings import KafkaConnection, kafka_connection

if TYPE_CHECKING:  # pandas (~2 s to import) loads only where a check runs, not in every run worker
    import pandas as pd

DLQ_COLUMNS = ["reason", "source_topic", "source_partition", "source_offset", "batch_id", "timestamp_ms"]


@dataclass
class DeadLetterSample:
    """`volume` records arrived since `since_ms` (exact, from offsets); `records` holds up to
    `cap` of them, parsed."""

    topic: str
    exists: bool
    since_ms: int
    volume: int
    records: pd.DataFrame

    def reasons(self) -> dict[str, int]:
        if self.records.empty:
            return {}
        return {str(k): int(v) for k, v in self.records["reason"].fillna("<none>").value_counts().items()}


def _parse(value: bytes | None, timestamp_ms: int) -> dict:
    try:
        body = json.loads(value) if value else {}
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    return {**{c: body.get(c) for c in DLQ_COLUMNS}, "timestamp_ms": timestamp_ms}


def read_dead_letters(
    bootstrap: KafkaConnection | str, topic: str, since_ms: int, cap: int = 10_000, timeout_ms: int = 10_000
) -> DeadLetterSample:
    """The dead letters that arrived at or after `since_ms` (Kafka record time)."""
    import pandas as pd
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        **kafka_connection(bootstrap).client_kwargs(), enable_auto_commit=False, consumer_timeout_ms=timeout_ms
    )
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            return DeadLetterSample(topic, False, since_ms, 0, pd.DataFrame(columns=DLQ_COLUMNS))
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        ends = consumer.end_offsets(tps)
        found = consumer.offsets_for_times({tp: since_ms for tp in tps})
        starts = {tp: (found[tp].offset if found.get(tp) is not None else ends[tp]) for tp in tps}
        volume = sum(ends[tp] - starts[tp] for tp in tps)
        rows = _consume(consumer, tps, starts, ends, min(cap, volume))
        return DeadLetterSample(topic, True, since_ms, volume, pd.DataFrame(rows, columns=DLQ_COLUMNS))
    finally:
        consumer.close()


def _consume(consumer, tps, starts, ends, wanted: int) -> list[dict]:
    """Up to `wanted` records between the start and end offsets (stops at the timeout)."""
    from kafka import TopicPartition

    pending = [tp for tp in tps if ends[tp] > starts[tp]]
    if not wanted or not pending:
        return []
    consumer.assign(pending)
    for tp in pending:
        consumer.seek(tp, starts[tp])
    rows: list[dict] = []
    for record in consumer:
        if record.offset < ends[TopicPartition(record.topic, record.partition)]:
            rows.append(_parse(record.value, record.timestamp))
        if len(rows) >= wanted:
            break
    return rows
