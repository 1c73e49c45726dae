"""All of esp's Kubernetes material from its settings, and the writing of it as YAML files.

Layout of the output folder (apply order in docs/kubernetes.md):

    00-namespace.yaml ... 40-stream-<name>.yaml   built-in kinds: `kubectl apply -f DIR`
    strimzi/                                      Strimzi custom resources: after the operator
    helm/dagster-values.yaml                      `helm upgrade --install ... -f` for dagster/dagster
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestration.k8s.dagster_chart import SETTINGS_CONFIG_MAP, helm_values
from orchestration.k8s.kafka import kafka_cluster, strimzi_documents, topic_documents
from orchestration.k8s.object_store import credentials_secret
from orchestration.k8s.objects import Document, ManifestFile, labels
from orchestration.k8s.settings import KubernetesSettings
from orchestration.k8s.spark import (
    driver_documents,
    pod_settings,
    rbac_documents,
    settings_config_map,
    settings_file,
    stream_drivers,
)
from pipelines.settings import EspSettings

DAGSTER_MASTER = "local[*]"
"""spark.master of Dagster's runs (backfills, checks): Spark inside the run's own pod."""


def _namespace(k8s: KubernetesSettings) -> Document:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": k8s.namespace, "labels": labels("namespace")},
    }


def render_all(settings: EspSettings, k8s: KubernetesSettings) -> tuple[ManifestFile, ...]:
    """Every file `esp k8s render` writes, for esp's `settings` on the cluster `k8s` describes."""
    drivers = stream_drivers(settings, k8s)
    topics = tuple({driver.input_topic.name: driver.input_topic for driver in drivers}.values())
    cluster = kafka_cluster(settings.kafka, k8s, topics)
    dagster = pod_settings(settings, k8s, DAGSTER_MASTER, settings.spark.driver_host, {})
    files = [
        ManifestFile("00-namespace.yaml", "kubernetes", (_namespace(k8s),), "The namespace of everything below."),
        ManifestFile(
            "10-spark-rbac.yaml",
            "kubernetes",
            rbac_documents(k8s),
            "The stream drivers' ServiceAccount and the Role that lets them manage their executor pods.",
        ),
        ManifestFile(
            "20-object-store-secret.yaml",
            "kubernetes",
            (credentials_secret(k8s),),
            "The object store's credentials: PLACEHOLDERS. Replace them (or create the Secret yourself) before use.",
        ),
        ManifestFile(
            "30-dagster-settings.yaml",
            "kubernetes",
            (settings_config_map(SETTINGS_CONFIG_MAP, k8s, "dagster", settings_file(dagster, "Dagster's pods")),),
            "The esp settings file of Dagster's code location and of the runs it launches ($ESP_CONFIG).",
        ),
        *(
            ManifestFile(
                f"40-stream-{driver.stream}.yaml",
                "kubernetes",
                driver_documents(driver, k8s),
                f"Stream {driver.stream}: its settings, the driver's headless Service and its StatefulSet "
                "(`esp stream run`, Spark in client mode).",
            )
            for driver in drivers
        ),
        ManifestFile(
            "strimzi/10-kafka.yaml",
            "kubernetes",
            strimzi_documents(cluster),
            "Kafka in KRaft mode through the Strimzi operator (install the operator first).",
        ),
        ManifestFile(
            "strimzi/20-topics.yaml",
            "kubernetes",
            topic_documents(cluster),
            "The streams' input topics (each stream creates its output topics when it starts).",
        ),
        ManifestFile(
            "helm/dagster-values.yaml",
            "helm-values",
            (helm_values(settings, k8s),),
            f"Values of the dagster/dagster chart, version {k8s.dagster_chart_version}: helm upgrade --install "
            f"dagster dagster/dagster --version {k8s.dagster_chart_version} -n {k8s.namespace} -f this file "
            "--set postgresql.postgresqlPassword=...",
        ),
    ]
    return tuple(files)


class _Dumper(yaml.SafeDumper):
    """Block style, multi-line strings as literal blocks, never anchors for repeated values."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _represent_str)


def file_text(manifest: ManifestFile) -> str:
    """A file's YAML: its comment, then its documents separated by `---`."""
    header = "".join(f"# {line}\n" for line in ["Rendered by `esp k8s render`; do not edit.", manifest.comment])
    body = yaml.dump_all(manifest.documents, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
    return header + body


def write_manifests(files: tuple[ManifestFile, ...], out: Path) -> list[Path]:
    """Write the files under `out` (created if needed; files of the same names replaced)."""
    written = []
    for manifest in files:
        path = out / manifest.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(file_text(manifest))
        written.append(path)
    return written
