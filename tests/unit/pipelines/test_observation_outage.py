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


def test_a_multi_stage_streams_observation_carries_every_stages_figures(tmp_path, monkeypatch):
    """The stream asset's observation (the UI's metadata) has each stage's channels, rows in and out,
    own time and probe p99 for a multi-stage job, and none of it for a one-stage job."""
    from pipelines.streams.metrics import BatchMetrics, ChannelMetrics

    monkeypatch.setattr(service_module, "end_offsets", lambda *_: {0: 0})
    spec = StreamSpec(name="paged", job="examples.sessions.pages:pages_job", input_topic="clicks", root=str(tmp_path))
    service = StreamService(None, spec)  # type: ignore[arg-type]
    assert [runtime.name for runtime in service.stream.stages] == ["main", "pages"]
    for runtime, rows_in, rows_out in zip(service.stream.stages, (900, 40), (40, 7), strict=True):
        probes = ChannelMetrics(channel=0, probe_latency_ms=[120.0])
        runtime.last_metrics = BatchMetrics(
            stream="paged",
            batch_id=3,
            epoch=0,
            channels=2,
            wall_time=1.0,
            input_records=rows_in,
            per_channel=[probes],
            stage=runtime.name,
            output_rows=rows_out,
            stage_ms=55.0,
        )
    service._record(service.stream.stages[0].last_metrics)
    metadata = service.observe(60.0).as_metadata()
    assert (metadata["stage_main_rows_in"], metadata["stage_main_rows_out"]) == (900, 40)
    assert (metadata["stage_pages_rows_in"], metadata["stage_pages_rows_out"]) == (40, 7)
    assert metadata["stage_pages_channels"] == 2 and metadata["stage_pages_ms"] == 55.0
    assert metadata["stage_pages_probe_p99_ms"] == 120.0


def test_a_one_stage_streams_observation_has_no_stage_figures(service, monkeypatch):
    monkeypatch.setattr(service_module, "end_offsets", lambda *_: {0: 0})
    assert not [key for key in service.observe(60.0).as_metadata() if key.startswith("stage_")]
