"""The local Kafka cluster's settings and each node's rendered server.properties: its own id, ports
and folders, the quorum of all three controllers, replication 3 with min ISR 2; one format for all
nodes (one cluster id, the same `--initial-controllers`). The single broker renders as before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestration.stack.errors import StackError
from orchestration.stack.jvm import JvmLayout
from orchestration.stack.kafka_broker import KafkaBroker, KafkaNode
from orchestration.stack.kafka_cluster import KafkaCluster
from pipelines.settings import EspSettings, KafkaSettings, SettingsError

REPO_ROOT = Path(__file__).resolve().parents[3]
SASL = {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "esp", "sasl_password": "pw1"}


def _layout(tmp_path: Path) -> JvmLayout:
    return JvmLayout(project_root=REPO_ROOT, jars_dir=tmp_path / "jars")


def _rendered(node: KafkaNode) -> dict[str, str]:
    node.render_config()
    lines = node.paths.config_file.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_one_node_is_the_default_and_keeps_the_single_broker_address():
    settings = KafkaSettings()
    assert settings.nodes == 1
    assert settings.bootstrap_servers == "127.0.0.1:9092"
    assert (settings.replication_factor, settings.min_insync_replicas) == (1, 1)


def test_a_cluster_lists_every_node_and_replicates_three_times_with_min_isr_two():
    settings = KafkaSettings(nodes=3)
    assert settings.bootstrap_servers == "127.0.0.1:9092,127.0.0.1:9102,127.0.0.1:9112"
    assert settings.connection.bootstrap_servers == settings.bootstrap_servers
    assert (settings.replication_factor, settings.min_insync_replicas) == (3, 2)
    third = settings.cluster_node(3)
    assert (third.client_port, third.controller_port, third.nodes) == (9112, 9113, 1)


def test_only_one_or_three_nodes_and_no_overlapping_ports():
    with pytest.raises(SettingsError, match="nodes"):
        EspSettings.load(kafka={"nodes": 2})
    with pytest.raises(SettingsError, match="overlap"):
        EspSettings.load(kafka={"nodes": 3, "node_port_step": 1})  # node 2's client port is node 1's controller's
    with pytest.raises(SettingsError, match="65535"):
        EspSettings.load(kafka={"nodes": 3, "client_port": 65530, "controller_port": 65000})


def test_each_node_renders_its_own_id_ports_and_folders_and_the_whole_quorum(tmp_path):
    cluster = KafkaCluster(
        KafkaSettings(nodes=3, client_port=19092, controller_port=19093), tmp_path, _layout(tmp_path)
    )
    configs = {n: _rendered(node) for n, node in cluster.nodes.items()}
    assert sorted(configs) == [1, 2, 3]
    for n, config in configs.items():
        client, controller = 19092 + 10 * (n - 1), 19093 + 10 * (n - 1)
        assert config["node.id"] == str(n)
        assert config["process.roles"] == "broker,controller"
        assert config["listeners"] == f"PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}"
        assert config["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{client}"
        assert config["controller.quorum.bootstrap.servers"] == "127.0.0.1:19093,127.0.0.1:19103,127.0.0.1:19113"
        assert "controller.quorum.voters" not in config  # a dynamic quorum: voters come from the format
        assert config["log.dirs"] == str(tmp_path / "kafka-cluster" / f"node-{n}" / "data")
        assert cluster.nodes[n].paths.pid_file == tmp_path / "kafka-cluster" / f"node-{n}" / "broker.pid"
        assert {key: config[key] for key in config if "replication" in key or "isr" in key or "insync" in key} == {
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "offsets.topic.replication.factor": "3",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "share.coordinator.state.topic.replication.factor": "3",
            "share.coordinator.state.topic.min.isr": "2",
        }


def test_a_sasl_cluster_gives_each_node_its_own_inter_broker_port(tmp_path):
    settings = KafkaSettings.model_validate(
        {"nodes": 3, "security": SASL, "sasl_listener": {"internal_port": 9094, "users": {"esp": "pw1"}}}
    )
    cluster = KafkaCluster(settings, tmp_path, _layout(tmp_path))
    listeners = [_rendered(node)["listeners"] for node in cluster.nodes.values()]
    assert [re.findall(r"INTERNAL://127.0.0.1:(\d+)", line) for line in listeners] == [["9094"], ["9104"], ["9114"]]


def test_the_single_broker_renders_as_before(tmp_path):
    config = _rendered(KafkaBroker(KafkaSettings(), tmp_path, _layout(tmp_path)))
    assert config["node.id"] == "1"
    assert config["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert config["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert config["log.dirs"] == str(tmp_path / "kafka" / "data")
    for key in ("offsets.topic", "transaction.state.log", "share.coordinator.state.topic"):
        assert config[f"{key}.replication.factor"] == "1"
    assert config["default.replication.factor"] == config["min.insync.replicas"] == "1"  # Kafka's own defaults


def test_all_nodes_are_formatted_for_one_cluster_with_the_same_initial_controllers(tmp_path, monkeypatch):
    calls: list[tuple[str, tuple[str, ...]]] = []
    monkeypatch.setattr(
        KafkaNode, "format_storage", lambda node, java, cluster_id, *options: calls.append((cluster_id, options))
    )
    cluster = KafkaCluster(KafkaSettings(nodes=3), tmp_path, _layout(tmp_path))
    cluster.format_storage("java")
    assert len(calls) == 3 and len({cluster_id for cluster_id, _ in calls}) == 1
    assert len({options for _, options in calls}) == 1
    flag, voters = calls[0][1]
    assert flag == "--initial-controllers"
    parsed = [re.fullmatch(r"(\d)@127\.0\.0\.1:(\d+):([A-Za-z0-9_-]{22})", voter) for voter in voters.split(",")]
    assert [(m.group(1), m.group(2)) for m in parsed if m] == [("1", "9093"), ("2", "9103"), ("3", "9113")]
    assert len({m.group(3) for m in parsed if m}) == 3, "each controller's metadata folder has its own directory id"


def test_a_formatted_cluster_is_not_formatted_again_and_a_half_formatted_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(KafkaNode, "format_storage", lambda *args: pytest.fail("formatted again"))
    cluster = KafkaCluster(KafkaSettings(nodes=3), tmp_path, _layout(tmp_path))
    for node in cluster.nodes.values():
        node.paths.data_dir.mkdir(parents=True)
        node.paths.formatted_marker.write_text("formatted")
    cluster.format_storage("java")
    cluster.nodes[2].paths.formatted_marker.unlink()
    with pytest.raises(StackError, match="storage of node-2 is missing"):
        cluster.format_storage("java")
