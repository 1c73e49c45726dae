"""esp against a broker whose client port requires SASL PLAIN: a client without credentials (or
with a wrong password) is refused, and with the settings' credentials every esp client works
through SASL: topic creation, the load producer, a real `esp stream run` (Spark's Kafka source,
its result and dead-letter sinks, the probe emitter and metrics publisher), the dead-letter and
metrics readers and the elasticity collector."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter

import pytest

from tests.conftest import free_port
from tests.integration.streams import kill_group, produce, read_topic, start_stream, wait_for_checkpoint

pytestmark = pytest.mark.integration

PASSWORD = "s3cret-sasl-pw"
SECURITY = {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "esp", "sasl_password": PASSWORD}


@pytest.fixture
def sasl_kafka(esp_settings, tmp_path):
    """A broker of its own whose client port is SASL_PLAINTEXT; its readiness check logs in."""
    from orchestration.stack.kafka_broker import KafkaBroker
    from orchestration.stack.project import jvm_layout
    from pipelines.settings import KafkaSettings

    kafka = KafkaSettings.model_validate(
        {
            "client_port": free_port(),
            "controller_port": free_port(),
            "heap": "512m",
            "security": SECURITY,
            "sasl_listener": {"internal_port": free_port(), "users": {"esp": PASSWORD}},
        }
    )
    broker = KafkaBroker(kafka, tmp_path / "run", jvm_layout(esp_settings))
    broker.up()
    assert broker.paths.config_file.stat().st_mode & 0o777 == 0o600, "the broker's passwords are readable by others"
    yield kafka
    broker.down()


def _refused(connection) -> bool:
    from kafka.errors import KafkaError

    from pipelines.kafka_topics import KafkaUnavailableError, admin_client

    try:
        with admin_client(connection, timeout_s=3) as admin:
            admin.list_topics()
    except (KafkaUnavailableError, KafkaError):
        return True
    return False


def test_every_esp_client_goes_through_sasl(sasl_kafka, tmp_path):
    from pydantic import SecretStr

    from orchestration.elasticity.collector import KafkaStreamSource
    from orchestration.quality.dead_letters import read_dead_letters
    from pipelines.kafka_topics import TopicSpec, end_offsets, ensure_topics
    from pipelines.load import LoadSpec, expected_counts, preload
    from pipelines.settings import KafkaConnection
    from pipelines.streams.spec import StreamSpec

    connection = sasl_kafka.connection
    wrong = sasl_kafka.security.model_copy(update={"sasl_password": SecretStr("wrong")})
    assert _refused(sasl_kafka.bootstrap_servers), "a client without credentials was served"
    assert _refused(KafkaConnection(sasl_kafka.bootstrap_servers, wrong)), "a wrong password was accepted"

    assert ensure_topics(connection, [TopicSpec(name="words", partitions=2)]) == ["words"]
    # Two spawned producer processes: the login crosses into them with the job.
    load = LoadSpec(topic="words", kind="words", vocabulary=40, words_per_line=3, processes=2, seed=7)
    assert preload(load, connection, records=2_000).records_sent == 2_000
    produce(connection, "words", ["sasl sasl", ""])  # the empty line is dead-lettered

    config = tmp_path / "esp.json"
    config.write_text(
        json.dumps(
            {
                "run_dir_name": str(tmp_path / "stream-run"),
                "kafka": {"host": sasl_kafka.host, "client_port": sasl_kafka.client_port, "security": SECURITY},
                "spark": {"master": "local[2]", "ui_enabled": False, "shuffle_partitions": 2},
            }
        )
    )
    root = tmp_path / "wc"
    spec = StreamSpec.model_validate(
        {
            "name": "wc",
            "input_topic": "words",
            "bootstrap_servers": sasl_kafka.bootstrap_servers,
            "kafka_security": SECURITY,
            "root": str(root),
        }
    )
    process = start_stream(config, tmp_path / "stream.log", "--name", "wc", "--root", str(root), "--channels", "2")
    try:
        wait_for_checkpoint(spec.checkpoint, "words", connection, timeout_s=150, process=process)
        time.sleep(2)  # a few probe rounds and one more metrics record
        reading = KafkaStreamSource(spec).read(time.time())
    finally:
        kill_group(process, signal.SIGTERM)

    expected = Counter(expected_counts(load, 2_000)) + Counter({"sasl": 2})
    latest: dict[str, int] = {}
    for record in read_topic(connection, spec.results_topic):
        row = json.loads(record.value)
        latest[row["word"]] = max(latest.get(row["word"], 0), row["count"])
    assert latest == dict(expected)

    letters = read_dead_letters(connection, spec.dead_letter_topic, since_ms=0)
    assert letters.reasons() == {"empty line": 1}
    assert reading.metrics, "the collector read no metrics through SASL"
    # Read through SASL: the broker's end offsets of that moment. Probes keep landing in the input
    # topic until the stream stopped, so they may be below the ends read now, never above.
    now = end_offsets(connection, "words")
    assert reading.end_offsets.keys() == now.keys()
    assert all(0 < reading.end_offsets[p] <= now[p] for p in now), (reading.end_offsets, now)
