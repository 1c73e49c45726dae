"""Spark on Kubernetes for esp's streams: each stream's driver runs `esp stream run` in a pod.

The driver runs in client mode in the one pod of a StatefulSet, not a Deployment: a stream must
never have two drivers. esp's lease (`elasticity.lease`, a lease object on the store) refuses a
second one and fences a deposed one; the at-most-one pod a StatefulSet guarantees keeps a rollout
or a replacement (while a lost node's pod still runs) from starting a driver only to be refused.
Its stable pod name makes the driver the owner of its executor pods (they go when it goes), and
its headless Service gives the executors a stable address for the driver's fixed ports. The
driver asks the Kubernetes API for executor pods (spark.master
`k8s://https://kubernetes.default.svc`) under a ServiceAccount whose Role may manage them.

The executors follow the stream's channels by esp's own mechanism (`spark.executors`,
`pipelines.streams.executors`): the pod's settings turn `follow_channels` on, and at each batch
boundary the driver asks for `ceil(channels / channels_per_executor)` executor pods within
`min_executors`..`max_executors` (SparkContext.requestTotalExecutors) and releases the surplus
(killExecutor), which Spark's Kubernetes back end turns into executor pods created and deleted.
Spark's dynamic allocation stays off: it would fight that target, and Spark refuses explicit
kills while it is on. The stream's root is on the object store, so the pod on any node finds its
checkpoint and state. Everything a pod needs is in the esp settings file its ConfigMap holds.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

import yaml

from orchestration.k8s.kafka import client_settings
from orchestration.k8s.objects import Document, labels, metadata, stream_object_name
from orchestration.k8s.settings import KubernetesSettings
from orchestration.streams.catalog import DEFAULT_CATALOG, catalog_streams, stream_spec
from pipelines.kafka_topics import TopicSpec
from pipelines.settings import EspSettings, ExecutorScalingSettings, ObjectStoreSettings, SettingsError

KUBERNETES_MASTER = "k8s://https://kubernetes.default.svc"
"""spark.master of a driver inside the cluster: the API server's in-cluster address."""

DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
UI_PORT = 4040
SETTINGS_DIR = "/etc/esp"
SETTINGS_KEY = "esp.yaml"
SETTINGS_PATH = f"{SETTINGS_DIR}/{SETTINGS_KEY}"


@dataclass(frozen=True)
class StreamDriver:
    """One stream run on Kubernetes: the names of its objects, its root and the settings its pod reads."""

    stream: str
    name: str
    """Name of the StatefulSet and the ConfigMap (and prefix of the executor pods)."""
    service: str
    """Name of the driver's headless Service."""
    root: str
    input_topic: TopicSpec
    settings: EspSettings
    """The esp settings file of the driver's pod (spark.master, spark.conf, Kafka, object store)."""


def object_store_conf(settings: EspSettings, k8s: KubernetesSettings) -> dict[str, str]:
    """s3a's settings for the store as pods reach it (credentials: the Secret, by the SDK's chain)."""
    access = _object_store(settings, k8s).access({})
    return {f"spark.hadoop.{key}": value for key, value in access.hadoop_conf().items()}


def _object_store(settings: EspSettings, k8s: KubernetesSettings) -> ObjectStoreSettings:
    endpoint = k8s.object_store_endpoint or settings.object_store.endpoint_url
    return settings.object_store.model_copy(update={"endpoint_url": endpoint})


def initial_executors(channels: int | None, scaling: ExecutorScalingSettings) -> int:
    """Executor pods a driver starts with: what `channels` channels get, or `min_executors` when
    the channel count is not known."""
    return scaling.min_executors if channels is None else scaling.executors_for(channels)


def kubernetes_spark_conf(
    settings: EspSettings, k8s: KubernetesSettings, driver: str, channels: int | None = None
) -> dict[str, str]:
    """The Spark conf a stream driver adds on Kubernetes; esp's `spark.conf` still wins over it.

    `channels`: the stream's channels when it first starts, which size its first executor pods;
    from then on the driver keeps them at what its channels need (`pod_settings`)."""
    if settings.spark.conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true":
        raise SettingsError(
            "spark.conf sets spark.dynamicAllocation.enabled: on Kubernetes the stream's executors follow its "
            "channels (spark.executors), and Spark refuses to release executors while dynamic allocation is on"
        )
    secret = k8s.object_store_secret
    return {
        "spark.submit.deployMode": "client",
        "spark.kubernetes.namespace": k8s.namespace,
        "spark.kubernetes.container.image": k8s.image,
        "spark.kubernetes.container.image.pullPolicy": k8s.image_pull_policy,
        "spark.kubernetes.authenticate.driver.serviceAccountName": k8s.spark_service_account,
        # The StatefulSet's one pod: the driver owns its executor pods, deleted with it.
        "spark.kubernetes.driver.pod.name": f"{driver}-0",
        "spark.kubernetes.executor.podNamePrefix": driver,
        "spark.kubernetes.executor.label.app.kubernetes.io/part-of": "esp",
        "spark.kubernetes.executor.label.app.kubernetes.io/component": "spark-executor",
        "spark.kubernetes.executor.label.app.kubernetes.io/instance": driver,
        "spark.kubernetes.executor.secretKeyRef.AWS_ACCESS_KEY_ID": f"{secret}:AWS_ACCESS_KEY_ID",
        "spark.kubernetes.executor.secretKeyRef.AWS_SECRET_ACCESS_KEY": f"{secret}:AWS_SECRET_ACCESS_KEY",
        # Executors dial the driver through its headless Service on fixed ports; it listens on the pod's IPs.
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": str(DRIVER_PORT),
        "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
        # The first executor pods; the driver then follows the channels (no dynamic allocation).
        "spark.executor.instances": str(initial_executors(channels, settings.spark.executors)),
        # One executor pod is sized as one worker of esp's standalone cluster.
        **settings.spark_cluster.executor_conf(),
        **object_store_conf(settings, k8s),
    }


def pod_settings(
    settings: EspSettings, k8s: KubernetesSettings, master: str, driver_host: str, conf: dict[str, str]
) -> EspSettings:
    """esp's settings as a pod in the cluster reads them: the image's checkout and Python, Strimzi's
    bootstrap Service, the object store's endpoint as pods reach it, no local Spark cluster, and
    executors that follow the channels (`spark.executors`, its bounds and ratio as esp's settings
    say; ignored by a `local[*]` master, such as Dagster's)."""
    spark = settings.spark.model_dump() | {
        "master": master,
        "driver_host": driver_host,
        "python_executable": k8s.image_python,
        "executors": settings.spark.executors.model_dump() | {"follow_channels": True},
        "conf": {**conf, **settings.spark.conf},
    }
    return EspSettings.model_validate(
        {
            "project_root": Path(k8s.image_project_root),
            "run_dir_name": settings.run_dir_name,
            "jars_dir_name": settings.jars_dir_name,
            "kafka": client_settings(settings.kafka, k8s),
            "spark": spark,
            "object_store": _object_store(settings, k8s),
        }
    )


def settings_file(settings: EspSettings, what: str) -> str:
    """The text of an esp settings file (`--config`) holding `settings`: only what differs from the defaults."""
    data = settings.model_dump(mode="json", exclude_defaults=True)
    data["project_root"] = str(settings.project_root)  # always written: the default is the working directory
    # Always written too: how the pod's executors follow its channels, whatever the image's defaults.
    data.setdefault("spark", {})["executors"] = settings.spark.executors.model_dump(mode="json")
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    return f"# esp settings of {what}, rendered by `esp k8s render`.\n{body}"


def stream_drivers(settings: EspSettings, k8s: KubernetesSettings) -> tuple[StreamDriver, ...]:
    """One driver per stream of `k8s.streams`, each from its catalog entry (built in or streams.yaml)."""
    entries = {entry.name: entry for entry in catalog_streams(settings.project_root / DEFAULT_CATALOG)}
    drivers = []
    for stream in k8s.streams:
        if stream not in entries:
            raise SettingsError(f"stream {stream!r} is not in esp's catalog; known: {', '.join(sorted(entries))}")
        name, service = stream_object_name(stream), stream_object_name(stream, "driver")
        host = f"{service}.{k8s.namespace}.svc"
        root = f"{k8s.state_root.rstrip('/')}/{stream}"
        # The channels a fresh stream starts with (a restarted one resumes its committed layout,
        # and its driver asks for the executors of that at its first batch).
        channels = stream_spec(settings, entries[stream], root=root).channels
        conf = kubernetes_spark_conf(settings, k8s, name, channels)
        pod = pod_settings(settings, k8s, KUBERNETES_MASTER, host, conf)
        spec = stream_spec(pod, entries[stream], root=root)
        topic = TopicSpec(name=spec.input_topic, partitions=spec.input_partitions or settings.kafka.default_partitions)
        drivers.append(StreamDriver(stream, name, service, spec.root, topic, pod))
    return tuple(drivers)


def rbac_documents(k8s: KubernetesSettings) -> tuple[Document, ...]:
    """The drivers' ServiceAccount, and a Role (bound to it) to create, watch and delete executor pods."""
    name, ns = k8s.spark_service_account, k8s.namespace
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(name, ns, "spark-driver")}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(name, ns, "spark-driver"),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
                "verbs": ["create", "get", "list", "watch", "update", "patch", "delete", "deletecollection"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(name, ns, "spark-driver"),
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
    }
    return account, role, binding


def settings_config_map(name: str, k8s: KubernetesSettings, component: str, text: str) -> Document:
    """A ConfigMap holding one esp settings file, mounted at SETTINGS_PATH."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(name, k8s.namespace, component),
        "data": {SETTINGS_KEY: text},
    }


def driver_documents(driver: StreamDriver, k8s: KubernetesSettings) -> tuple[Document, ...]:
    """The stream's settings ConfigMap, the driver's headless Service and its StatefulSet."""
    ns = k8s.namespace
    instance = {"app.kubernetes.io/instance": driver.name}
    selector = labels("stream-driver", **instance)
    config = settings_config_map(driver.name, k8s, "stream-driver", settings_file(driver.settings, driver.name))
    config["metadata"]["labels"].update(instance)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(driver.service, ns, "stream-driver", **instance),
        "spec": {
            "clusterIP": "None",
            # Executors must reach the driver as soon as it runs: it has no readiness probe to pass.
            "publishNotReadyAddresses": True,
            "selector": selector,
            "ports": [
                {"name": "driver-rpc", "port": DRIVER_PORT, "targetPort": DRIVER_PORT},
                {"name": "blockmanager", "port": BLOCK_MANAGER_PORT, "targetPort": BLOCK_MANAGER_PORT},
            ],
        },
    }
    esp = posixpath.join(posixpath.dirname(k8s.image_python), "esp")
    command = [esp, "stream", "run", "--name", driver.stream, "--root", driver.root, "--config", SETTINGS_PATH]
    container = {
        "name": "driver",
        "image": k8s.image,
        "imagePullPolicy": k8s.image_pull_policy,
        "workingDir": k8s.image_project_root,
        "command": command,
        "envFrom": [{"secretRef": {"name": k8s.object_store_secret}}],
        "ports": [
            {"name": "driver-rpc", "containerPort": DRIVER_PORT},
            {"name": "blockmanager", "containerPort": BLOCK_MANAGER_PORT},
            {"name": "spark-ui", "containerPort": UI_PORT},
        ],
        "resources": {
            "requests": {"cpu": k8s.driver_cpu, "memory": k8s.driver_memory},
            "limits": {"memory": k8s.driver_memory},
        },
        "volumeMounts": [
            {"name": "settings", "mountPath": SETTINGS_DIR, "readOnly": True},
            # The channels' RocksDB working sets (rebuilt from the object store when missing).
            {"name": "scratch", "mountPath": "/tmp"},
        ],
    }
    driver_set = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(driver.name, ns, "stream-driver", **instance),
        "spec": {
            "replicas": 1,
            "serviceName": driver.service,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "serviceAccountName": k8s.spark_service_account,
                    # SIGTERM stops the stream between two batches.
                    "terminationGracePeriodSeconds": 120,
                    "containers": [container],
                    "volumes": [
                        {"name": "settings", "configMap": {"name": driver.name}},
                        {"name": "scratch", "emptyDir": {}},
                    ],
                },
            },
        },
    }
    return config, service, driver_set
