"""Integration fixtures: one real Kafka broker per test session, on free ports, in a temp folder."""

from __future__ import annotations

import socket
import uuid

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory, esp_settings):
    """A real KRaft broker started for this test run and stopped after it."""
    from orchestration.stack.jvm import ensure_jars
    from orchestration.stack.kafka_broker import KafkaBroker
    from orchestration.stack.project import jvm_layout
    from pipelines.settings import KafkaSettings

    ensure_jars(jvm_layout(esp_settings))
    settings = KafkaSettings(client_port=_free_port(), controller_port=_free_port(), heap="768m")
    broker = KafkaBroker(settings, tmp_path_factory.mktemp("kafka-run"), jvm_layout(esp_settings))
    broker.up()
    yield broker
    broker.down()


@pytest.fixture(scope="session")
def bootstrap(kafka_broker) -> str:
    return kafka_broker.settings.bootstrap_servers


@pytest.fixture
def topic_factory(bootstrap):
    """Creates uniquely named topics for one test."""
    from pipelines.kafka_topics import TopicSpec, ensure_topics

    def make(prefix: str, partitions: int = 4) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, [TopicSpec(name=name, partitions=partitions)])
        return name

    return make
