"""An observation of a running stream while Kafka cannot answer: the stream's lag is the last
known one and the observation loop goes on. Before, the error of the lag's metadata request left
`StreamService.run` and stopped the stream when one Kafka node of three was SIGKILLed (found by
the cluster profile's test)."""

from __future__ import annotations

import pytest
from kafka.errors import KafkaConnectionError

from elasticity.layout import Layout
from elasticity.state import Location
from pipelines.kafka_topics import UnknownTopicError
from pipelines.streams import service as service_module
from pipelines.streams.service import StreamService
from pipelines.streams.spec import StreamSpec


@pytest.fixture
def service(tmp_path) -> StreamService:
    spec = StreamSpec(name="outage", input_topic="words", bootstrap_servers="127.0.0.1:1", root=str(tmp_path))
    service = StreamService(None, spec)  # type: ignore[arg-type]  # observing touches no Spark without a query
    Location.of(spec.elastic_root).ensure()
    service.stream.registry.initialize(Layout.uniform(2))
    return service


@pytest.mark.parametrize(
    "error", [KafkaConnectionError("111 ECONNREFUSED"), OSError("reset"), UnknownTopicError("words")]
)
def test_the_lag_is_the_last_known_one_while_the_broker_cannot_answer(service, monkeypatch, error):
    monkeypatch.setattr(service_module, "end_offsets", lambda *_: {0: 40, 1: 2})
    progress = {"sources": [{"description": "KafkaV2[Subscribe[words]]", "endOffset": {"words": {"0": 10, "1": 2}}}]}
    assert service._lag(progress) == 30

    def unreachable(*_):
        raise error

    monkeypatch.setattr(service_module, "end_offsets", unreachable)
    assert service._lag(progress) == 30
    assert service.observe(5.0).lag_records == 30  # the observation is made, not raised
