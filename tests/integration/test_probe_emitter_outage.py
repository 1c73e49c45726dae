"""The probe emitter and the metrics publisher on a real broker that is SIGKILLed and restarted:
the emitter reports the outage and its probes arrive again afterwards (before, the thread died on
the first failed send); a metrics publish during the outage returns instead of failing the batch
(before, it raised after blocking for a minute), and the next one through counts the dropped."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from elasticity.layout import Layout
from tests.conftest import free_port

pytestmark = pytest.mark.integration


def _wait_until(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)


def test_probes_resume_after_a_broker_restart(esp_settings, tmp_path):
    from orchestration.stack.kafka_broker import KafkaBroker
    from orchestration.stack.project import jvm_layout
    from pipelines.kafka_topics import TopicSpec, end_offsets, ensure_topics
    from pipelines.settings import KafkaSettings
    from pipelines.streams.metrics import BatchMetrics, read_recent
    from pipelines.streams.metrics_publisher import MetricsPublisher
    from pipelines.streams.probe_emitter import ProbeEmitter

    kafka = KafkaSettings(client_port=free_port(), controller_port=free_port(), heap="512m")
    broker = KafkaBroker(kafka, tmp_path / "run", jvm_layout(esp_settings))
    broker.up()
    emitter = None
    try:
        ensure_topics(
            kafka.bootstrap_servers, [TopicSpec(name="probes", partitions=1), TopicSpec(name="m", partitions=1)]
        )
        publisher = MetricsPublisher(kafka.bootstrap_servers, "m", b"s", max_backoff_s=1.0)
        batch = 0

        def publish() -> bool:
            nonlocal batch
            batch += 1
            return publisher.publish(BatchMetrics(stream="s", batch_id=batch, epoch=1, channels=2, wall_time=0.0))

        assert publish()
        emitter = ProbeEmitter(kafka.bootstrap_servers, "probes", lambda: Layout.uniform(2), 0.2, max_backoff_s=2.0)
        emitter.start()
        _wait_until(lambda: emitter.sent >= 4, 30)

        pid = broker.running_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        psutil.Process(pid).wait(timeout=30)
        _wait_until(lambda: emitter.health().failures_in_a_row >= 2, 60)
        assert emitter.is_alive()
        assert not publish() and not publish()  # dropped, not raised

        broker.up()
        before = sum(end_offsets(kafka.bootstrap_servers, "probes").values())
        _wait_until(lambda: sum(end_offsets(kafka.bootstrap_servers, "probes").values()) >= before + 4, 90)
        _wait_until(lambda: emitter.health().failures_in_a_row == 0, 30)
        assert emitter.health().failures >= 2
        _wait_until(publish, 60)
        newest = read_recent(kafka.bootstrap_servers, "m", limit=1)[-1]
        assert newest.batch_id == batch and newest.metrics_dropped >= 2
        publisher.close()
    finally:
        if emitter is not None:
            emitter.stop()
            emitter.join(timeout=10)
        broker.down()
