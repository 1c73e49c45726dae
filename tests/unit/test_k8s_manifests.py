"""`esp k8s render`, on paper: the manifests from default and non-default settings, every document
validated offline (Kubernetes kinds strictly by kubernetes-validate, Strimzi resources and Helm
values by esp's contract schemas), the settings carried through, and broken documents refused."""

from __future__ import annotations

import copy
import socket
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestration.cli.main import app
from orchestration.k8s.contracts import cross_document_problems
from orchestration.k8s.objects import ManifestFile
from orchestration.k8s.render import render_all, write_manifests
from orchestration.k8s.settings import KubernetesSettings
from orchestration.k8s.spark import KUBERNETES_MASTER, SETTINGS_KEY, initial_executors, kubernetes_spark_conf
from orchestration.k8s.validate import ValidatorMissing, kubernetes_problems, validate_files
from orchestration.names import RESCALE_TAG
from pipelines.settings import EspSettings, ExecutorScalingSettings, SettingsError

REPO_ROOT = Path(__file__).resolve().parents[2]

ESP_SETTINGS = {
    "kafka": {"client_port": 9192, "heap": "1g", "default_partitions": 6},
    "spark": {
        "conf": {"spark.sql.streaming.metricsEnabled": "true"},
        # Off here, on in the pods; bounds that clamp the built-in streams' 4 channels (one executor each) to 3.
        "executors": {"channels_per_executor": 1, "min_executors": 2, "max_executors": 3},
    },
    "spark_cluster": {"workers": 3, "cores_per_worker": 2, "memory_per_worker": "2g"},
    "object_store": {"endpoint_url": "http://127.0.0.1:9000", "region": "eu-west-1"},
}
K8S_SETTINGS = {
    "namespace": "streaming",
    "image_repository": "registry.example/esp",
    "image_tag": "2026.11.1",
    "storage_class": "fast-ssd",
    "streams": ["wordcount", "adclicks"],
    "state_root": "s3a://bucket/esp",
    "object_store_endpoint": "http://minio.storage.svc:9000",
    "kafka_replicas": 5,
    "kubernetes_version": "1.31",
}


def _documents(files: tuple[ManifestFile, ...], kind: str) -> list[dict]:
    return [d for f in files if f.kind == "kubernetes" for d in f.documents if d["kind"] == kind]


def _one(files: tuple[ManifestFile, ...], kind: str, name: str | None = None) -> dict:
    found = [d for d in _documents(files, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, found)
    return found[0]


def _values(files: tuple[ManifestFile, ...]) -> dict:
    (values,) = [f.documents[0] for f in files if f.kind == "helm-values"]
    return values


@pytest.fixture(scope="module")
def default_files() -> tuple[ManifestFile, ...]:
    return render_all(EspSettings(project_root=REPO_ROOT), KubernetesSettings())


@pytest.fixture(scope="module")
def custom(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("settings")
    esp, k8s = folder / "esp.yaml", folder / "kubernetes.yaml"
    esp.write_text(yaml.safe_dump({"project_root": str(REPO_ROOT), **ESP_SETTINGS}))
    k8s.write_text(yaml.safe_dump(K8S_SETTINGS))
    return esp, k8s


@pytest.fixture(scope="module")
def custom_files(custom) -> tuple[ManifestFile, ...]:
    esp, k8s = custom
    return render_all(EspSettings.load(esp), KubernetesSettings.load(k8s))


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test: validation must work offline."""

    def refuse(*args, **kwargs):
        raise AssertionError("the validator tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_every_kubernetes_settings_field_has_a_default_and_a_description():
    KubernetesSettings()  # every field has a default
    for name, field in KubernetesSettings.model_fields.items():
        assert field.description and "\n" not in field.description, name


def test_the_default_render_validates_offline(default_files, tmp_path, no_network):
    assert validate_files(default_files, KubernetesSettings().kubernetes_version) == []
    written = write_manifests(default_files, tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in written) == [
        "00-namespace.yaml",
        "10-spark-rbac.yaml",
        "20-object-store-secret.yaml",
        "30-dagster-settings.yaml",
        "40-stream-wordcount.yaml",
        "helm/dagster-values.yaml",
        "strimzi/10-kafka.yaml",
        "strimzi/20-topics.yaml",
    ]
    # What is written is what was validated: the files read back to the same documents.
    for manifest, path in zip(default_files, written):
        assert [d for d in yaml.safe_load_all(path.read_text())] == list(manifest.documents), path


def test_a_non_default_render_validates_offline(custom_files, no_network):
    assert validate_files(custom_files, K8S_SETTINGS["kubernetes_version"]) == []


def test_the_namespace_and_image_flow_everywhere(custom_files):
    for manifest in custom_files:
        for doc in manifest.documents if manifest.kind == "kubernetes" else ():
            if doc["kind"] != "Namespace":
                assert doc["metadata"]["namespace"] == "streaming", (manifest.path, doc["kind"])
    assert _one(custom_files, "Namespace")["metadata"]["name"] == "streaming"
    image = "registry.example/esp:2026.11.1"
    for stream in ("wordcount", "adclicks"):
        driver = _one(custom_files, "StatefulSet", f"esp-stream-{stream}")
        (container,) = driver["spec"]["template"]["spec"]["containers"]
        assert container["image"] == image
        assert container["command"][1:5] == ["stream", "run", "--name", stream]
        assert container["command"][container["command"].index("--root") + 1] == f"s3://bucket/esp/{stream}"
        # At most one driver pod per stream, behind the headless Service the driver's host names.
        assert driver["spec"]["replicas"] == 1
        assert driver["spec"]["serviceName"] == f"esp-stream-{stream}-driver"
    user_code = _values(custom_files)["dagster-user-deployments"]["deployments"][0]
    assert user_code["image"] == {
        "repository": "registry.example/esp",
        "tag": "2026.11.1",
        "pullPolicy": "IfNotPresent",
    }
    assert _values(custom_files)["runLauncher"]["config"]["k8sRunLauncher"]["jobNamespace"] == "streaming"


def _driver_settings(files: tuple[ManifestFile, ...], stream: str) -> EspSettings:
    text = _one(files, "ConfigMap", f"esp-stream-{stream}")["data"][SETTINGS_KEY]
    return EspSettings.model_validate(yaml.safe_load(text))


def test_the_spark_conf_of_a_driver_carries_the_settings(custom_files):
    settings = _driver_settings(custom_files, "wordcount")
    conf = settings.spark.conf
    assert settings.spark.master == KUBERNETES_MASTER
    assert settings.spark.driver_host == "esp-stream-wordcount-driver.streaming.svc"
    assert settings.spark.python_executable == "/opt/esp/.venv/bin/python"
    assert conf["spark.kubernetes.namespace"] == "streaming"
    assert conf["spark.kubernetes.container.image"] == "registry.example/esp:2026.11.1"
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "esp-spark"
    assert conf["spark.kubernetes.driver.pod.name"] == "esp-stream-wordcount-0"  # the StatefulSet's pod
    # The executors follow the channels by esp's mechanism, within esp's bounds; no dynamic allocation.
    assert not [key for key in conf if key.startswith("spark.dynamicAllocation.")]
    assert settings.spark.executors == ExecutorScalingSettings(
        follow_channels=True, channels_per_executor=1, min_executors=2, max_executors=3
    )
    assert conf["spark.executor.instances"] == "3"  # the stream's 4 channels, one executor each, at most 3
    assert (conf["spark.executor.cores"], conf["spark.executor.memory"]) == ("2", "2g")
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio.storage.svc:9000"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.sql.streaming.metricsEnabled"] == "true"  # esp's own spark.conf comes along
    assert settings.object_store.endpoint_url == "http://minio.storage.svc:9000"
    assert settings.kafka.bootstrap_servers == "esp-kafka-bootstrap.streaming.svc:9192"
    # The headless Service the driver host names, on the driver's fixed ports.
    service = _one(custom_files, "Service", "esp-stream-wordcount-driver")
    assert service["spec"]["clusterIP"] == "None"
    assert {p["port"] for p in service["spec"]["ports"]} == {
        int(conf["spark.driver.port"]),
        int(conf["spark.driver.blockManager.port"]),
    }
    # The Role lets the driver's ServiceAccount manage executor pods.
    (rule,) = _one(custom_files, "Role")["rules"]
    assert "pods" in rule["resources"] and {"create", "watch", "delete"} <= set(rule["verbs"])
    binding = _one(custom_files, "RoleBinding")
    assert binding["subjects"][0]["name"] == _one(custom_files, "ServiceAccount")["metadata"]["name"]


def test_the_driver_settings_file_says_how_executors_follow(default_files, custom_files):
    for files, bounds in ((default_files, (2, 1, 8)), (custom_files, (1, 2, 3))):
        for driver in _documents(files, "StatefulSet"):
            name = driver["metadata"]["name"]
            text = _one(files, "ConfigMap", name)["data"][SETTINGS_KEY]
            executors = yaml.safe_load(text)["spark"]["executors"]  # written out, not left to defaults
            assert executors["follow_channels"] is True, name
            assert (
                executors["channels_per_executor"],
                executors["min_executors"],
                executors["max_executors"],
            ) == bounds
            assert not [key for key in yaml.safe_load(text)["spark"]["conf"] if "dynamicAllocation" in key], name
    # The default: 4 channels, 2 per executor.
    assert _driver_settings(default_files, "wordcount").spark.conf["spark.executor.instances"] == "2"
    # Dagster's pods run local[*], where following is ignored.
    dagster = EspSettings.model_validate(
        yaml.safe_load(_one(default_files, "ConfigMap", "esp-dagster")["data"][SETTINGS_KEY])
    )
    assert dagster.spark.master == "local[*]" and dagster.spark.executors.follow_channels


def test_the_first_executors_are_what_the_initial_channels_need():
    scaling = ExecutorScalingSettings(channels_per_executor=2, min_executors=2, max_executors=5)
    assert [initial_executors(channels, scaling) for channels in (None, 1, 4, 5, 7, 100)] == [2, 2, 2, 3, 4, 5]
    settings = EspSettings(project_root=REPO_ROOT, spark={"executors": scaling.model_dump()})
    conf = kubernetes_spark_conf(settings, KubernetesSettings(), "esp-stream-x", channels=7)
    assert conf["spark.executor.instances"] == "4"
    assert kubernetes_spark_conf(settings, KubernetesSettings(), "esp-stream-x")["spark.executor.instances"] == "2"


def test_kafka_replicates_three_times_with_two_in_sync(custom_files):
    kafka = _one(custom_files, "Kafka")
    config = kafka["spec"]["kafka"]["config"]
    assert (config["default.replication.factor"], config["min.insync.replicas"]) == (3, 2)
    assert (config["offsets.topic.replication.factor"], config["transaction.state.log.min.isr"]) == (3, 2)
    assert config["num.partitions"] == 6
    assert kafka["spec"]["kafka"]["listeners"][0]["port"] == 9192
    pool = _one(custom_files, "KafkaNodePool")
    assert pool["spec"]["replicas"] == 5 and sorted(pool["spec"]["roles"]) == ["broker", "controller"]
    assert pool["spec"]["storage"]["volumes"][0]["class"] == "fast-ssd"
    assert pool["spec"]["jvmOptions"] == {"-Xms": "1g", "-Xmx": "1g"}
    topics = {t["metadata"]["name"]: t["spec"] for t in _documents(custom_files, "KafkaTopic")}
    assert topics == {"words": {"partitions": 6, "replicas": 3}, "ads": {"partitions": 6, "replicas": 3}}


def test_the_default_cluster_is_three_nodes(default_files):
    assert _one(default_files, "KafkaNodePool")["spec"]["replicas"] == 3
    assert "class" not in _one(default_files, "KafkaNodePool")["spec"]["storage"]["volumes"][0]


def test_dagster_values_follow_the_workspace_and_the_instance_config(default_files):
    values = _values(default_files)
    workspace = yaml.safe_load((REPO_ROOT / "workspace.yaml").read_text())["load_from"][0]["python_module"]
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["name"] == workspace["location_name"]
    args = deployment["dagsterApiGrpcArgs"]
    assert args[args.index("-m") + 1] == workspace["module_name"] and args[args.index("-a") + 1] == "defs"
    assert deployment["env"]["ESP_CONFIG"] == "/etc/esp/esp.yaml"
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    queued = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    assert queued["tagConcurrencyLimits"] == [
        {"key": RESCALE_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
    ]
    assert values["postgresql"]["enabled"] is True and values["telemetry"] == {"enabled": False}
    dagster = EspSettings.model_validate(
        yaml.safe_load(_one(default_files, "ConfigMap", "esp-dagster")["data"]["esp.yaml"])
    )
    assert dagster.spark.master == "local[*]" and dagster.kafka.bootstrap_servers == "esp-kafka-bootstrap.esp.svc:9092"


def test_no_secret_is_rendered(custom_files):
    secret = _one(custom_files, "Secret")
    assert set(secret["stringData"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert set(secret["stringData"].values()) == {"REPLACE-ME"}
    assert _values(custom_files)["postgresql"]["postgresqlPassword"] == "CHANGE-ME"


def test_the_cli_writes_the_files_and_lists_them(custom, tmp_path):
    esp, k8s = custom
    result = CliRunner().invoke(app, ["k8s", "render", "--out", str(tmp_path), "--config", str(esp), "--k8s", str(k8s)])
    assert result.exit_code == 0, result.output
    assert "40-stream-adclicks.yaml" in result.output and "validated offline" in result.output
    kafka = list(yaml.safe_load_all((tmp_path / "strimzi" / "10-kafka.yaml").read_text()))
    assert kafka[0]["spec"]["replicas"] == 5


def test_the_cli_refuses_settings_it_cannot_render(tmp_path):
    k8s = tmp_path / "kubernetes.yaml"
    k8s.write_text(yaml.safe_dump({"streams": ["nosuchstream"]}))
    result = CliRunner().invoke(app, ["k8s", "render", "--out", str(tmp_path / "out"), "--k8s", str(k8s)])
    assert result.exit_code == 1 and "nosuchstream" in result.output
    assert not (tmp_path / "out").exists()


def test_settings_esp_cannot_carry_to_kubernetes_are_refused():
    sasl = {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": "p"}
    with pytest.raises(SettingsError, match="SASL_PLAINTEXT"):
        render_all(EspSettings(project_root=REPO_ROOT, kafka={"security": sasl}), KubernetesSettings())
    # The executors' bounds are esp's settings (spark.executors), not said twice.
    with pytest.raises(ValueError, match="min_executors"):
        KubernetesSettings(min_executors=1)  # type: ignore[call-arg]
    # Dynamic allocation would fight the executors that follow the channels (and Spark refuses their release).
    dynamic = {"conf": {"spark.dynamicAllocation.enabled": "true"}}
    with pytest.raises(SettingsError, match="spark.dynamicAllocation.enabled"):
        render_all(EspSettings(project_root=REPO_ROOT, spark=dynamic), KubernetesSettings())
    with pytest.raises(ValueError):
        KubernetesSettings(kafka_replicas=1)  # replication 3 needs 3 nodes


def test_a_broken_driver_is_rejected(default_files, no_network):
    driver = copy.deepcopy(_one(default_files, "StatefulSet"))
    driver["spec"]["replicas"] = "one"
    assert any("replicas" in p for p in kubernetes_problems(driver, "1.34"))
    misspelt = copy.deepcopy(_one(default_files, "StatefulSet"))
    misspelt["spec"]["template"]["spec"]["serviceAcountName"] = "esp-spark"  # strict: no unknown field
    assert kubernetes_problems(misspelt, "1.34")


def test_without_the_validator_the_check_says_so(default_files, monkeypatch):
    monkeypatch.setitem(sys.modules, "kubernetes_validate", None)  # `import` raises ImportError
    with pytest.raises(ValidatorMissing, match="dev dependencies"):
        validate_files(default_files, "1.34")


def test_broken_custom_resources_and_values_are_rejected(default_files):
    topic = copy.deepcopy(_one(default_files, "KafkaTopic"))
    topic["spec"]["replicas"] = 0
    assert any("replicas" in p for p in kubernetes_problems(topic, "1.34"))
    pool = copy.deepcopy(_one(default_files, "KafkaNodePool"))
    del pool["metadata"]["labels"]["strimzi.io/cluster"]
    assert kubernetes_problems(pool, "1.34")
    kafka = copy.deepcopy(_one(default_files, "Kafka"))
    kafka["spec"]["kafka"]["listeners"][0]["port"] = 9404  # Prometheus' port
    assert kubernetes_problems(kafka, "1.34")

    values = copy.deepcopy(_values(default_files))
    values["runLauncer"] = values.pop("runLauncher")
    broken = (ManifestFile("helm/dagster-values.yaml", "helm-values", (values,), ""),)
    assert [p.file for p in validate_files(broken, "1.34")] == ["helm/dagster-values.yaml"] * 2  # unknown, missing


def test_replication_the_brokers_cannot_hold_is_rejected(default_files):
    kafka, pool = copy.deepcopy(_one(default_files, "Kafka")), copy.deepcopy(_one(default_files, "KafkaNodePool"))
    topic = copy.deepcopy(_one(default_files, "KafkaTopic"))
    assert cross_document_problems([kafka, pool, topic]) == []
    kafka["spec"]["kafka"]["config"]["min.insync.replicas"] = 3
    pool["spec"]["replicas"] = 2
    problems = cross_document_problems([kafka, pool, topic])
    assert len(problems) == 3, problems  # replication 3 on 2 brokers, min ISR 3 of 3, the topic's 3 replicas
    assert cross_document_problems([pool]) == ["KafkaNodePool dual-role names Kafka 'esp', which is not there"]
