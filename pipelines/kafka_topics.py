"""Kafka topic administration for esp jobs: typed topic specs, idempotent creation, checks.

Errors name the problem: a broker that does not answer, an unknown topic, a topic that exists
with a different partition count.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import BaseModel, ConfigDict, Field

from pipelines.settings import KafkaConnection, kafka_connection


class KafkaUnavailableError(ConnectionError):
    """No broker answered at the bootstrap address."""


class UnknownTopicError(LookupError):
    """A job was pointed at a topic that does not exist."""


class TopicMismatchError(ValueError):
    """A topic exists but not with the partition count asked for."""


class TopicSpec(BaseModel):
    """One topic esp creates."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$", description="Topic name.")
    partitions: int = Field(4, ge=1, le=10_000, description="Number of partitions.")
    replication_factor: int | None = Field(
        None,
        ge=1,
        description="Replicas per partition; None: the broker's default, which esp renders from kafka.nodes "
        "(KafkaSettings.replication_factor: 1 on a single broker, 3 on the cluster, with min.insync.replicas 2).",
    )
    configs: dict[str, str] = Field(default_factory=dict, description="Topic-level configs, e.g. retention.ms.")


HOUR_MS = 3600 * 1000


def retention_configs(hours: float) -> dict[str, str]:
    """Topic configs that bound a topic by time: records older than `hours` are deleted. Segments
    roll at least daily (the broker's default roll is 7 days, and only closed segments expire)."""
    retention_ms = int(hours * HOUR_MS)
    return {
        "retention.ms": str(retention_ms),
        "segment.ms": str(min(retention_ms, 24 * HOUR_MS)),
        "cleanup.policy": "delete",
    }


@contextmanager
def admin_client(bootstrap_servers: KafkaConnection | str, timeout_s: float = 10.0) -> Iterator[KafkaAdminClient]:  # noqa: F821
    """A kafka-python admin client, or KafkaUnavailableError naming the address."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(
            **kafka_connection(bootstrap_servers).client_kwargs(),
            request_timeout_ms=int(timeout_s * 1000),
            bootstrap_timeout_ms=int(timeout_s * 1000),
        )
    except (KafkaError, OSError) as err:
        raise KafkaUnavailableError(
            f"no Kafka broker answers at {bootstrap_servers} ({err.__class__.__name__}); "
            "is it running? try `esp infra up`"
        ) from err
    try:
        yield admin
    finally:
        admin.close()


def topic_partition_counts(bootstrap_servers: KafkaConnection | str) -> dict[str, int]:
    """Every topic on the broker with its partition count."""
    with admin_client(bootstrap_servers) as admin:
        described = admin.describe_topics()
    return {t["name"]: len(t["partitions"]) for t in described if not t["is_internal"]}


def ensure_topics(bootstrap_servers: KafkaConnection | str, specs: list[TopicSpec]) -> list[str]:
    """Create the topics that do not exist yet; returns the names created.

    An existing topic with the same partition count is fine; a different count is an error,
    because keyed jobs would silently route differently.
    """
    existing = topic_partition_counts(bootstrap_servers)
    for spec in specs:
        if spec.name in existing and existing[spec.name] != spec.partitions:
            raise TopicMismatchError(
                f"topic {spec.name!r} exists with {existing[spec.name]} partitions, not {spec.partitions}"
            )
    missing = [s for s in specs if s.name not in existing]
    if not missing:
        return []
    # -1: the broker's default replication factor (and its min.insync.replicas, as no topic sets it).
    request = {
        s.name: {"num_partitions": s.partitions, "replication_factor": s.replication_factor or -1, "configs": s.configs}
        for s in missing
    }
    with admin_client(bootstrap_servers) as admin:
        admin.create_topics(request, wait_for_metadata=True)
    return [s.name for s in missing]


def delete_topics(bootstrap_servers: KafkaConnection | str, names: list[str], timeout_s: float = 30.0) -> None:
    """Delete the named topics (a name already gone is fine), waiting up to `timeout_s` for the broker."""
    from kafka.errors import UnknownTopicOrPartitionError, for_code

    if not names:
        return
    # One request for all of them; the broker answers per topic, so a topic already gone is told
    # apart from a real failure without a round trip per topic.
    with admin_client(bootstrap_servers) as admin:
        answer = admin.delete_topics(names, timeout_ms=int(timeout_s * 1000), raise_errors=False)
    failed = {
        topic["name"]: for_code(topic["error_code"])
        for topic in answer["topics"]
        if topic["error_code"] not in (0, UnknownTopicOrPartitionError.errno)
    }
    if failed:
        error = next(iter(failed.values()))
        raise error(f"could not delete topics {sorted(failed)}: {sorted({e.__name__ for e in failed.values()})}")


def require_topics(bootstrap_servers: KafkaConnection | str, names: list[str]) -> dict[str, int]:
    """Partition counts of the named topics, or UnknownTopicError listing the missing ones."""
    existing = topic_partition_counts(bootstrap_servers)
    missing = sorted(set(names) - set(existing))
    if missing:
        raise UnknownTopicError(
            f"unknown Kafka topic(s) {', '.join(missing)} at {bootstrap_servers}; create them with `esp topics create`"
        )
    return {n: existing[n] for n in names}


def end_offsets(bootstrap_servers: KafkaConnection | str, topic: str) -> dict[int, int]:
    """The broker's end offset of every partition of a topic (UnknownTopicError if none)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**kafka_connection(bootstrap_servers).client_kwargs())
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        if not partitions:
            raise UnknownTopicError(f"unknown Kafka topic {topic} at {bootstrap_servers}")
        return {tp.partition: offset for tp, offset in consumer.end_offsets(partitions).items()}
    finally:
        consumer.close()
