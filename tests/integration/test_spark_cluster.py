"""esp's Spark standalone cluster (`spark_cluster.enabled`: a master and 2 one-core workers on
127.0.0.1), started and stopped as a user does (`esp infra up/status/down` in real subprocesses,
with esp's single Kafka broker, all in a temporary run folder): the word-count stream runs on it
(`esp stream run`, its `spark.master` the cluster's by default) with the Kafka connector shipped to
the executors, one executor on each worker (read from the master's and the workers' JSON state),
rescaled online 2 → 4 → 2, and its counts equal the batch oracle; after `down` no port of the
cluster is open. `make test-cluster` runs it (marker `cluster`); `make test` leaves it out."""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.integration.streams import (
    kill_group,
    produce,
    rescale_while_producing,
    start_stream,
    wait_for_checkpoint,
)
from tests.integration.streams import (
    run_esp as esp,
)

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

REPO_ROOT = Path(__file__).resolve().parents[2]
APP_NAME = "esp-on-the-cluster"
STREAM = "wc-cluster"


def _free_ports() -> dict[str, int]:
    """Kafka's two ports and the cluster's base ports (master + 1, + 2 for the workers, likewise the
    UIs) all free, below the ephemeral range (32768+) where a concurrent test's connection may take one."""
    from orchestration.stack.errors import PortTakenError
    from orchestration.stack.kafka_broker import ensure_port_free

    for _ in range(100):
        base = random.randrange(20000, 30000, 20)
        ports = {"client": base, "controller": base + 1, "master": base + 10, "webui": base + 15}
        try:
            for port in [base, base + 1, *range(base + 10, base + 13), *range(base + 15, base + 18)]:
                ensure_port_free("127.0.0.1", port)
        except PortTakenError:
            continue
        return ports
    raise AssertionError("no free ports for Kafka and the Spark cluster between 20000 and 30000")


@pytest.fixture
def config_file(tmp_path) -> Path:
    ports = _free_ports()
    path = tmp_path / "esp.json"
    path.write_text(
        json.dumps(
            {
                "project_root": str(REPO_ROOT),
                "run_dir_name": str(tmp_path / "run"),
                "kafka": {"client_port": ports["client"], "controller_port": ports["controller"], "heap": "384m"},
                # No spark.master: with the cluster enabled, the stream's is the cluster's.
                "spark": {"app_name": APP_NAME, "ui_enabled": False, "shuffle_partitions": 4, "driver_memory": "1g"},
                "spark_cluster": {
                    "enabled": True,
                    "master_port": ports["master"],
                    "webui_port": ports["webui"],
                    "memory_per_worker": "768m",
                    "daemon_heap": "256m",
                    "start_timeout_s": 240,
                },
            }
        )
    )
    return path


@pytest.fixture
def settings(config_file) -> Iterator:
    """The stack's settings; whatever the test left running is stopped by its pids."""
    from orchestration.stack.project import kafka_broker
    from orchestration.stack.spark_cluster import SparkCluster
    from pipelines.settings import EspSettings

    settings = EspSettings.load(config_file)
    yield settings
    SparkCluster(settings.spark_cluster, settings.run_dir).down()
    kafka_broker(settings).down()


def _lines(count: int, offset: int = 0) -> list[str]:
    return [" ".join(f"w{(i * 13 + j * 7) % 211}" for j in range(1 + i % 5)) for i in range(offset, offset + count)]


def test_a_stream_on_the_spark_cluster_rescales_2_4_2_and_equals_the_oracle(config_file, settings, spark, tmp_path):
    from orchestration.stack.kafka_broker import ensure_port_free
    from orchestration.stack.spark_cluster import SparkCluster
    from pipelines import kafka_io
    from pipelines.jobs.wordcount import batch_oracle
    from pipelines.kafka_topics import TopicSpec, ensure_topics
    from pipelines.streams.metrics import read_recent
    from pipelines.streams.names import checkpoint_path, control_path, metrics_topic, results_table_path
    from tests.results import latest_word_counts

    cluster_settings = settings.spark_cluster
    assert settings.spark.master == cluster_settings.master_url
    cluster = SparkCluster(cluster_settings, settings.run_dir)
    bootstrap = settings.kafka.bootstrap_servers

    up = esp(config_file, "infra", "up")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "Kafka is up" in up.stdout and "Spark cluster is up" in up.stdout, up.stdout
    status = esp(config_file, "infra", "status")
    assert status.returncode == 0, status.stdout
    spark_rows = [line for line in status.stdout.splitlines() if "spark " in line]
    assert [row.count("running") for row in spark_rows] == [1, 1, 1], status.stdout
    assert "2/2 workers alive" in status.stdout

    topic = f"words-{random.randrange(1 << 30):x}"
    ensure_topics(bootstrap, [TopicSpec(name=topic, partitions=4)])
    produce(bootstrap, topic, _lines(3000))
    root = tmp_path / "stream"
    checkpoint = checkpoint_path(root)
    args = ["--name", STREAM, "--job", "wordcount", "--topic", topic, "--root", str(root), "--channels", "2"]
    process = start_stream(config_file, tmp_path / "stream.log", *args, "--trigger", "0.5", "--observe-every", "5")
    try:
        wait_for_checkpoint(checkpoint, topic, bootstrap, process=process, timeout_s=300)

        # The stream is the cluster's one application, its executors one per worker.
        state = cluster.master_state()
        assert state is not None
        apps = [app for app in state["activeapps"] if app["name"] == APP_NAME]
        assert len(apps) == 1 and apps[0]["cores"] == 2, state["activeapps"]
        ours = {(w["host"], w["port"]) for w in state["workers"] if w["state"] == "ALIVE"}
        assert len(ours) == 2 and all(w["coresused"] == 1 for w in state["workers"] if w["state"] == "ALIVE")
        assert sorted(cluster.executors_per_worker(apps[0]["id"]).values()) == [1, 1]

        stream = SimpleNamespace(spec=SimpleNamespace(control_dir=control_path(root), input_topic=topic))
        for round_, channels in enumerate((4, 2)):
            rescale_while_producing(stream, channels, bootstrap, _lines(1000, 10_000 * (round_ + 1)), timeout_s=300)
            wait_for_checkpoint(checkpoint, topic, bootstrap, process=process, timeout_s=300)
    finally:
        kill_group(process, signal.SIGTERM)
    log = (tmp_path / "stream.log").read_text(errors="replace")

    counts = latest_word_counts(spark, results_table_path(root))
    assert not any(word.startswith("__probe") for word in counts)
    assert counts == batch_oracle(kafka_io.read_batch(spark, bootstrap, topic)), log[-3000:]
    metrics = read_recent(bootstrap, metrics_topic(STREAM), limit=200)
    assert {4, 2} <= {m.channels for m in metrics} and metrics[-1].channels == 2

    down = esp(config_file, "infra", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "Spark cluster stopped (master, worker-1, worker-2)" in down.stdout and "Kafka stopped" in down.stdout
    for port in cluster_settings.ports:
        ensure_port_free("127.0.0.1", port)  # nothing listens on it any more
    stopped = esp(config_file, "infra", "status")
    assert stopped.returncode == 3
    assert [line.count("stopped") for line in stopped.stdout.splitlines() if "spark " in line] == [1, 1, 1]
