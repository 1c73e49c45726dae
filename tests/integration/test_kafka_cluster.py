"""The 3-node KRaft cluster esp starts (`kafka.nodes: 3`), started and stopped as a user does
(`esp infra up/status/down` in a real subprocess): a topic gets 3 replicas and min ISR 2, acks=all
writes and a consumer group carry on with one node SIGKILLed, nothing is lost, the node comes
back, and after `down` no port of the cluster is open. `make test-cluster` runs it (marker
`cluster`); `make test` leaves it out."""

from __future__ import annotations

import json
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.streams import run_esp as esp

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

REPO_ROOT = Path(__file__).resolve().parents[2]
TOPIC = "orders"
PORT_STEP = 10


def _cluster_ports() -> tuple[int, int]:
    """A client and controller base port whose three nodes' ports are all free, below the ephemeral
    range (32768+), where no client connection of a concurrent test takes one meanwhile."""
    from orchestration.stack.errors import PortTakenError
    from orchestration.stack.kafka_broker import ensure_port_free

    for _ in range(100):
        client = random.randrange(20000, 30000, 2 * 3 * PORT_STEP)
        try:
            for n in range(3):
                ensure_port_free("127.0.0.1", client + n * PORT_STEP)
                ensure_port_free("127.0.0.1", client + 1 + n * PORT_STEP)
        except PortTakenError:
            continue
        return client, client + 1
    raise AssertionError("no free ports for the cluster between 20000 and 30000")


@pytest.fixture
def config_file(tmp_path) -> Path:
    client, controller = _cluster_ports()
    kafka = {"nodes": 3, "client_port": client, "controller_port": controller, "node_port_step": PORT_STEP}
    path = tmp_path / "esp.json"
    path.write_text(
        json.dumps(
            {
                "project_root": str(REPO_ROOT),
                "run_dir_name": str(tmp_path / "run"),
                "kafka": {**kafka, "heap": "384m", "start_timeout_s": 240},
            }
        )
    )
    return path


@pytest.fixture
def cluster(config_file) -> Iterator:
    """The cluster the config file describes (for its pids and the kill); stopped whatever happens."""
    from orchestration.stack.kafka_cluster import KafkaCluster
    from orchestration.stack.project import jvm_layout
    from pipelines.settings import EspSettings

    settings = EspSettings.load(config_file)
    cluster = KafkaCluster(settings.kafka, settings.run_dir, jvm_layout(settings))
    yield cluster
    cluster.down()


def _produce(connection, values: range) -> None:
    """acks=all writes, each acknowledged (idempotent: a retried batch is not written twice)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        **connection.client_kwargs(),
        acks="all",
        enable_idempotence=True,
        retries=100,
        delivery_timeout_ms=120_000,
        key_serializer=str.encode,
        value_serializer=str.encode,
    )
    try:
        futures = [producer.send(TOPIC, key=str(v), value=str(v)) for v in values]
        producer.flush(timeout=150)
        for future in futures:
            future.get(timeout=1)
    finally:
        producer.close(timeout=10)


def _consume(connection, group: str | None, expected: int) -> list[int]:
    """Read `expected` records (as the group, from its committed offsets, else from the start)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        TOPIC,
        **connection.client_kwargs(),
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        value_deserializer=bytes.decode,
    )
    values: list[int] = []
    deadline = time.monotonic() + 150
    try:
        while len(values) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                values += [int(record.value) for record in records]
        if group is not None:
            consumer.commit()
        # Nothing beyond what was written: a short poll finds no more.
        values += [int(r.value) for records in consumer.poll(timeout_ms=2000).values() for r in records]
    finally:
        consumer.close()
    return values


def _partitions(connection) -> list[dict]:
    from pipelines.kafka_topics import admin_client

    with admin_client(connection) as admin:
        return admin.describe_topics([TOPIC])[0]["partitions"]


def _wait_for_isr(connection, size: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while (isr := [len(p["isr_nodes"]) for p in _partitions(connection)]) != [size] * len(isr):
        assert time.monotonic() < deadline, f"in-sync replicas {isr}, not {size} each"
        time.sleep(1)


def _ports_open(settings) -> list[int]:
    ports = [port for n in settings.node_ids for port in settings.cluster_node(n).ports]
    open_ports = []
    for port in ports:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                open_ports.append(port)
    return open_ports


def test_the_cluster_keeps_acks_all_writes_and_reads_through_a_killed_node(config_file, cluster):
    from kafka.admin import ConfigResource, ConfigResourceType

    from pipelines.kafka_topics import TopicSpec, admin_client, ensure_topics

    connection = cluster.settings.connection
    up = esp(config_file, "infra", "up")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "Kafka cluster is up" in up.stdout
    assert cluster.brokers() == 3
    status = esp(config_file, "infra", "status")
    assert status.returncode == 0, status.stdout
    assert [line.count("running") for line in status.stdout.splitlines() if "kafka node-" in line] == [1, 1, 1]

    # Created as every esp topic is, without a replication factor: the cluster's 3, min ISR 2.
    assert ensure_topics(connection, [TopicSpec(name=TOPIC, partitions=3)]) == [TOPIC]
    assert [sorted(p["replica_nodes"]) for p in _partitions(connection)] == [[1, 2, 3]] * 3
    with admin_client(connection) as admin:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC)], config_filter="all")
    assert described["topic"][TOPIC]["min.insync.replicas"]["value"] == "2"

    _produce(connection, range(0, 300))
    assert sorted(_consume(connection, "checker", 300)) == list(range(0, 300))

    # SIGKILL the leader of partition 0 by its pid: two in-sync replicas remain, acks=all still works.
    leader = next(p["leader_id"] for p in _partitions(connection) if p["partition_index"] == 0)
    killed_pid = cluster.kill(leader)
    assert cluster.status()[leader].running is False
    down_one = esp(config_file, "infra", "status")
    assert down_one.returncode == 3 and "stale pid file" in down_one.stdout, down_one.stdout
    _produce(connection, range(300, 600))
    _wait_for_isr(connection, 2)
    # The group reads on from its committed offsets (its coordinator may have moved).
    assert sorted(_consume(connection, "checker", 300)) == list(range(300, 600))

    # `esp infra up` restarts the stopped node; it catches up and rejoins every ISR.
    again = esp(config_file, "infra", "up")
    assert again.returncode == 0 and "Kafka cluster is up" in again.stdout, again.stdout + again.stderr
    assert cluster.status()[leader].pid not in (None, killed_pid)
    assert cluster.brokers() == 3
    _produce(connection, range(600, 700))
    _wait_for_isr(connection, 3)
    assert sorted(_consume(connection, None, 700)) == list(range(0, 700)), "a record was lost or doubled"

    down = esp(config_file, "infra", "down")
    assert down.returncode == 0 and "Kafka cluster stopped (node-1, node-2, node-3)" in down.stdout, down.stdout
    assert _ports_open(cluster.settings) == []
    stopped = esp(config_file, "infra", "status")
    assert stopped.returncode == 3
    assert [line.count("stopped") for line in stopped.stdout.splitlines() if "kafka node-" in line] == [1, 1, 1]
