"""Both built-in pipelines on the cluster profile, as a user runs them: `esp infra up` with
`profile: cluster` starts Dagster's PostgreSQL, the object store, a 3-node KRaft Kafka and the Spark
standalone cluster (2 one-core workers); each stream runs by `esp stream run` with its folder on the
object store (`s3a://esp/streams/<name>`, the profile's default) and its executors following its
channels (2 channels per executor, at most 2).

Word count: rescaled online 2 → 4 → 2, the executor count read from the driver's REST API follows
(1 → 2 → 1); while it runs at 4 channels a Spark worker is SIGKILLed (with its executor and
Python workers), then a Kafka node; records keep coming, each is restarted by `esp infra up`, and
the counts read back from the object store equal the batch oracle over the topic. Ad clicks:
2 → 4 → 2 with its executors following, windowed counts plus late ones equal the oracle. Then
`esp infra down` stops everything and frees every port.

Marked `cluster`: `make test-cluster` runs it (several minutes), `make test` does not.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.integration.streams import kill_group, produce, start_stream, wait_for_checkpoint
from tests.integration.streams import run_esp as esp
from tests.results import newest_by_key, stored_rows
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

REPO_ROOT = Path(__file__).resolve().parents[2]
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _free_base(span: int) -> int:
    """A base port below the ephemeral range with `span` free ports above it."""
    from orchestration.stack.errors import PortTakenError
    from orchestration.stack.kafka_broker import ensure_port_free

    for _ in range(100):
        base = random.randrange(20000, 30000, 100)
        try:
            for port in range(base, base + span):
                ensure_port_free("127.0.0.1", port)
        except PortTakenError:
            continue
        return base
    raise AssertionError("no free port range between 20000 and 30000")


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A run folder PostgreSQL's user can reach: as root, esp runs the server as `postgres`, and
    pytest's own tmp folders are private to their owner."""
    folder = Path(tempfile.mkdtemp(prefix="esp-cluster-profile-"))
    folder.chmod(0o755)
    yield folder / "run"
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def config_file(tmp_path, run_dir) -> Path:
    base = _free_base(80)
    ui_port = free_port()
    path = tmp_path / "esp.json"
    path.write_text(
        json.dumps(
            {
                "profile": "cluster",
                "project_root": str(REPO_ROOT),
                "run_dir_name": str(run_dir),
                # Nodes at base, +10, +20 (client) and +1, +11, +21 (controller).
                "kafka": {"client_port": base, "controller_port": base + 1, "heap": "384m"},
                "postgres": {"port": base + 40},
                "object_store": {"server": {"port": base + 41}},
                "spark": {
                    "app_name": "esp-cluster-profile",
                    "ui_enabled": True,  # the driver's REST API: where the executor count is read
                    "shuffle_partitions": 4,
                    "driver_memory": "1g",
                    "conf": {"spark.ui.port": str(ui_port)},
                },
                "spark_cluster": {
                    "master_port": base + 50,
                    "webui_port": base + 60,
                    "memory_per_worker": "768m",
                    "daemon_heap": "256m",
                    "start_timeout_s": 240,
                },
            }
        )
    )
    return path


@pytest.fixture
def settings(config_file, monkeypatch) -> Iterator:
    """The profile's settings, this process's pyarrow pointed at its object store; whatever the
    test left running is stopped by its pids."""
    from orchestration.stack.kafka_cluster import KafkaCluster
    from orchestration.stack.object_store import ObjectStoreServer
    from orchestration.stack.postgres import postgres_server
    from orchestration.stack.project import jvm_layout
    from orchestration.stack.spark_cluster import SparkCluster
    from pipelines.settings import EspSettings

    settings = EspSettings.load(config_file)
    for name, value in settings.object_store.access({}).environment().items():
        monkeypatch.setenv(name, value)
    yield settings
    SparkCluster(settings.spark_cluster, settings.run_dir).down()
    KafkaCluster(settings.kafka, settings.run_dir, jvm_layout(settings)).down()
    postgres_server(settings).down()
    ObjectStoreServer(settings.object_store.server, settings.run_dir).down()


def _active_executors(ui_port: str) -> int | None:
    """Active executors of the driver's application, from Spark's REST API (None: no answer)."""
    try:
        with _DIRECT.open(f"http://127.0.0.1:{ui_port}/api/v1/applications", timeout=3) as response:
            app = json.loads(response.read())[0]["id"]
        with _DIRECT.open(f"http://127.0.0.1:{ui_port}/api/v1/applications/{app}/executors", timeout=3) as response:
            executors = json.loads(response.read())
    except (OSError, ValueError, IndexError, KeyError):
        return None
    return sum(1 for e in executors if e["id"] != "driver" and e.get("isActive", True))


def _wait_for_executors(settings, count: int, process) -> None:
    port = settings.spark.conf["spark.ui.port"]

    def reached() -> bool:
        assert process.poll() is None, "the stream process exited"
        return _active_executors(port) == count

    wait_for(f"{count} active executor(s) on the driver's REST API", reached, timeout_s=120)


def _rescale(root: str, channels: int, bootstrap: str, topic: str, records: list[str]) -> None:
    from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleTarget
    from pipelines.streams.names import control_path

    request = RescaleRequest(target=RescaleTarget(op="scale_to", channels=channels), reason="test")
    control = ControlChannel(control_path(root))
    control.request(request)
    produce(bootstrap, topic, records)  # a batch runs, and applies it, only when records arrive
    result = control.wait_for_result(request.request_id, 300)
    assert result.status == "committed" and result.executors == (1 if channels <= 2 else 2), result


def _lines(count: int, offset: int = 0) -> list[str]:
    return [" ".join(f"w{(i * 13 + j * 7) % 211}" for j in range(1 + i % 5)) for i in range(offset, offset + count)]


def _ad(i: int, event_time_ms: int) -> str:
    fields = {"event_id": f"e{i}", "user_id": f"u{i % 17}", "page_id": f"p{i % 5}", "ad_id": f"a{i % 30}"}
    kind = "view" if i % 3 else "click"
    return json.dumps(
        {**fields, "campaign_id": f"c{i % 6}", "ad_type": "banner", "event_type": kind, "event_time": event_time_ms}
    )


def _kill_worker(settings, n: int) -> None:
    """SIGKILL Spark worker `n` with its executors and their Python workers (its process group)."""
    from orchestration.stack.spark_cluster import SparkCluster

    pid = SparkCluster(settings.spark_cluster, settings.run_dir).workers[n].running_pid()
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)


def _kill_kafka_node(settings, node: int) -> None:
    from orchestration.stack.kafka_cluster import KafkaCluster
    from orchestration.stack.project import jvm_layout

    pid = KafkaCluster(settings.kafka, settings.run_dir, jvm_layout(settings)).status()[node].pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)


def _restart_stopped(config_file: Path, settings) -> None:
    """`esp infra up` again: it starts what is stopped and leaves what runs."""
    again = esp(config_file, "infra", "up")
    assert again.returncode == 0, again.stdout + again.stderr
    status = esp(config_file, "infra", "status")
    assert status.returncode == 0, status.stdout


def _wordcount_round(config_file: Path, settings, spark, tmp_path: Path) -> None:
    from pipelines import kafka_io
    from pipelines.jobs.wordcount import batch_oracle
    from pipelines.streams.names import checkpoint_path, results_table_path

    bootstrap = settings.kafka.bootstrap_servers
    topic, root = "words", "s3a://esp/streams/wc-cluster"
    produce(bootstrap, topic, _lines(3000))
    args = ["--name", "wc-cluster", "--job", "wordcount", "--topic", topic, "--channels", "2", "--trigger", "0.5"]
    process = start_stream(config_file, tmp_path / "wordcount.log", *args)
    try:
        wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, process=process, timeout_s=300)
        _wait_for_executors(settings, 1, process)
        _rescale(root, 4, bootstrap, topic, _lines(1000, 10_000))
        _wait_for_executors(settings, 2, process)

        _kill_worker(settings, 2)
        produce(bootstrap, topic, _lines(1500, 20_000))
        wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, process=process, timeout_s=300)
        _restart_stopped(config_file, settings)
        _wait_for_executors(settings, 2, process)  # the target stayed 2: the master places one again

        _kill_kafka_node(settings, 3)
        produce(bootstrap, topic, _lines(1500, 30_000))
        wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, process=process, timeout_s=300)
        _restart_stopped(config_file, settings)

        _rescale(root, 2, bootstrap, topic, _lines(1000, 40_000))
        _wait_for_executors(settings, 1, process)
        wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, process=process, timeout_s=300)
    finally:
        kill_group(process, signal.SIGTERM)
    log = (tmp_path / "wordcount.log").read_text(errors="replace")
    counts = {
        key[0]: row["count"] for key, row in newest_by_key(stored_rows(results_table_path(root)), ["word"]).items()
    }
    assert not any(word.startswith("__probe") for word in counts)
    assert counts == batch_oracle(kafka_io.read_batch(spark, bootstrap, topic)), log[-3000:]


def _adclicks_round(config_file: Path, settings, spark, tmp_path: Path) -> None:
    from pipelines import kafka_io
    from pipelines.jobs.adclicks import batch_oracle
    from pipelines.streams.names import checkpoint_path, late_table_path, results_table_path
    from pipelines.streams.spec import StreamSpec

    bootstrap = settings.kafka.bootstrap_servers
    topic, root = "ads", "s3a://esp/streams/ads-cluster"
    now = int(time.time() * 1000)
    produce(bootstrap, topic, [_ad(i, now - 60_000 + i * 40) for i in range(1500)])
    args = ["--name", "ads-cluster", "--job", "adclicks", "--topic", topic, "--channels", "2", "--trigger", "0.5"]
    process = start_stream(config_file, tmp_path / "adclicks.log", *args)
    try:
        wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, process=process, timeout_s=300)
        _wait_for_executors(settings, 1, process)
        _rescale(root, 4, bootstrap, topic, [_ad(10_000 + i, now + i * 20) for i in range(800)])
        _wait_for_executors(settings, 2, process)
        late = [_ad(20_000 + i, now - 600_000 + i * 100) for i in range(300)]  # behind the watermark
        _rescale(root, 2, bootstrap, topic, late + [_ad(30_000 + i, now + 20_000 + i * 20) for i in range(800)])
        _wait_for_executors(settings, 1, process)
        wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, process=process, timeout_s=300)
    finally:
        kill_group(process, signal.SIGTERM)
    log = (tmp_path / "adclicks.log").read_text(errors="replace")
    keys = ["campaign_id", "window_start"]
    counted = Counter(
        {
            (key[0], int(key[1].timestamp() * 1000)): row["count"]
            for key, row in newest_by_key(stored_rows(results_table_path(root)), keys).items()
        }
    )
    late_counts = Counter()
    for row in stored_rows(late_table_path(root)):
        late_counts[(row["campaign_id"], row["window_start_ms"])] += row["n"]
    assert sum(late_counts.values()) >= len([e for e in late if '"view"' in e])
    oracle = batch_oracle(kafka_io.read_batch(spark, bootstrap, topic), StreamSpec().window_seconds)
    assert dict(counted + late_counts) == oracle, log[-3000:]


def test_both_pipelines_on_the_cluster_profile_follow_their_channels_through_kills(
    config_file, settings, spark, tmp_path
):
    from orchestration.stack.kafka_broker import ensure_port_free
    from pipelines.kafka_topics import TopicSpec, ensure_topics

    up = esp(config_file, "infra", "up")
    assert up.returncode == 0, up.stdout + up.stderr
    for piece in ("PostgreSQL is up", "Object store is up", "Kafka cluster is up", "Spark cluster is up"):
        assert piece in up.stdout, up.stdout
    ensure_topics(
        settings.kafka.connection, [TopicSpec(name="words", partitions=4), TopicSpec(name="ads", partitions=4)]
    )

    _wordcount_round(config_file, settings, spark, tmp_path)
    _adclicks_round(config_file, settings, spark, tmp_path)

    down = esp(config_file, "infra", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    for piece in ("Spark cluster stopped", "Kafka cluster stopped", "PostgreSQL stopped", "Object store stopped"):
        assert piece in down.stdout, down.stdout
    ports = [*settings.spark_cluster.ports, settings.postgres.port, settings.object_store.server.port]
    ports += [port for node in settings.kafka.node_ids for port in settings.kafka.cluster_node(node).ports]
    for port in ports:
        ensure_port_free("127.0.0.1", port)
