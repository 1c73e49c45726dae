"""The elasticity sensor on a real metrics topic that holds malformed records: it skips and counts
them and still decides (before, one garbage record raised in every tick for the topic's 6 h retention)."""

from __future__ import annotations

import json
import time

import pytest
from dagster import DagsterInstance, build_sensor_context

pytestmark = pytest.mark.integration


def test_sensor_skips_and_reports_malformed_metrics_records(kafka_broker, tmp_path):
    from kafka import KafkaProducer

    from orchestration.elasticity.policy import ElasticityPolicy
    from orchestration.elasticity.sensor import make_elasticity_sensor
    from orchestration.names import resize_job_name
    from orchestration.resources import EspSettingsResource
    from orchestration.streams.catalog import StreamEntry, stream_spec
    from pipelines.kafka_topics import TopicSpec, ensure_topics
    from pipelines.streams.metrics import METRICS_TOPIC_CONFIGS, BatchMetrics, ChannelMetrics
    from pipelines.streams.metrics_publisher import MetricsPublisher

    config = tmp_path / "esp.json"
    kafka = kafka_broker.settings.model_dump(mode="json")
    config.write_text(json.dumps({"run_dir_name": str(tmp_path / "run"), "kafka": kafka}))
    settings = EspSettingsResource(config_file=str(config))
    entry = StreamEntry(name="malformed_metrics", job="wordcount", input_topic="malformed-in", load_kind="words")
    spec = stream_spec(settings.load(), entry)
    ensure_topics(
        spec.bootstrap_servers, [TopicSpec(name=spec.metrics_topic, partitions=1, configs=METRICS_TOPIC_CONFIGS)]
    )

    publisher = MetricsPublisher(spec.bootstrap_servers, spec.metrics_topic, entry.name.encode())
    now = time.time()
    for batch in range(3):
        channels = [ChannelMetrics(channel=c, records=100, probe_latency_ms=[50.0]) for c in (0, 1)]
        metrics = BatchMetrics(entry.name, batch, 1, 2, now - 3 + batch, 200, batch_ms=100.0, per_channel=channels)
        assert publisher.publish(metrics)
    publisher.close()
    producer = KafkaProducer(bootstrap_servers=spec.bootstrap_servers)
    garbage = [b"\xff\x00 not json", b"[1, 2, 3]", json.dumps({"stream": entry.name, "batch_id": "x"}).encode()]
    wrong_type = {"stream": entry.name, "batch_id": 9, "epoch": 1, "channels": 2, "wall_time": "now"}
    garbage.append(json.dumps(wrong_type).encode())
    for value in garbage:
        producer.send(spec.metrics_topic, value=value, key=entry.name.encode())
    producer.flush()
    producer.close()

    sensor = make_elasticity_sensor(entry, resize_job_name(entry.name), 10, ElasticityPolicy(sample_period_s=10.0))
    with DagsterInstance.ephemeral() as instance:
        result = sensor(build_sensor_context(instance=instance, resources={"esp_settings": settings}))
    assert not result.run_requests
    message = result.skip_reason.skip_message
    assert "skipped 4 malformed metrics record(s)" in message, message
    assert "at 2 channels" in message, message  # it decided on the three good records
