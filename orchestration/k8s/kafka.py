"""Kafka on Kubernetes through the Strimzi operator: a KRaft cluster and the topics esp reads.

One `KafkaNodePool` of dual-role nodes (broker and controller each), a `Kafka` in KRaft mode with
replication 3 and `min.insync.replicas` 2 (the rule of esp's own 3-node cluster,
`KafkaSettings.replication_factor` and `min_insync_replicas`), and a `KafkaTopic` for each input
topic the streams read. A stream creates its own results, dead-letter and metrics topics when it
starts (`pipelines.streams.topics`), with the cluster's default replication. Strimzi's API
`kafka.strimzi.io/v1` (Strimzi 0.49 and later; the only one from 1.0 on).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestration.k8s.objects import Document, metadata
from orchestration.k8s.settings import KubernetesSettings
from pipelines.kafka_topics import TopicSpec
from pipelines.settings import KafkaSettings, SettingsError

STRIMZI_API = "kafka.strimzi.io/v1"
CLUSTER_LABEL = "strimzi.io/cluster"
LISTENER = "plain"
NODE_POOL = "dual-role"

_CLUSTER_RULE = KafkaSettings(nodes=3)
"""esp's 3-node cluster: its replication factor and minimum in-sync replicas are the ones used here."""


@dataclass(frozen=True)
class KafkaCluster:
    """The Strimzi Kafka cluster esp needs, as resolved from the settings."""

    name: str
    namespace: str
    version: str
    nodes: int
    replication_factor: int
    min_insync_replicas: int
    listener_port: int
    heap: str
    default_partitions: int
    storage_size: str
    storage_class: str | None
    topics: tuple[TopicSpec, ...]


def kafka_cluster(kafka: KafkaSettings, k8s: KubernetesSettings, topics: tuple[TopicSpec, ...]) -> KafkaCluster:
    """The cluster for esp's `kafka` settings (port, heap, partitions) on Kubernetes."""
    return KafkaCluster(
        name=k8s.kafka_cluster,
        namespace=k8s.namespace,
        version=k8s.kafka_version,
        nodes=k8s.kafka_replicas,
        replication_factor=_CLUSTER_RULE.replication_factor,
        min_insync_replicas=_CLUSTER_RULE.min_insync_replicas,
        listener_port=kafka.client_port,
        heap=kafka.heap,
        default_partitions=kafka.default_partitions,
        storage_size=k8s.kafka_storage_size,
        storage_class=k8s.storage_class,
        topics=topics,
    )


def client_settings(kafka: KafkaSettings, k8s: KubernetesSettings) -> KafkaSettings:
    """esp's clients' view of the cluster: its bootstrap Service, one address in front of every broker.

    Only PLAINTEXT is rendered: SASL or TLS would need a Strimzi listener with authentication, a
    KafkaUser and the credentials in a Secret, which are not done (docs/kubernetes.md)."""
    if kafka.security.protocol != "PLAINTEXT" or kafka.sasl_listener is not None:
        raise SettingsError(
            f"kafka.security.protocol {kafka.security.protocol} (or kafka.sasl_listener) is not rendered for "
            "Kubernetes yet: only PLAINTEXT inside the cluster (see docs/kubernetes.md)"
        )
    return KafkaSettings(host=k8s.kafka_bootstrap_host, client_port=kafka.client_port, nodes=1)


def _kafka_name(topic: str) -> str:
    """A topic's name as a Kubernetes object name (lowercase letters, digits, '-' and '.')."""
    return re.sub(r"[^a-z0-9.-]", "-", topic.lower()).strip("-.") or "topic"


def strimzi_documents(cluster: KafkaCluster) -> tuple[Document, ...]:
    """The node pool and the cluster."""
    volume: Document = {
        "id": 0,
        "type": "persistent-claim",
        "size": cluster.storage_size,
        "deleteClaim": False,
        "kraftMetadata": "shared",
    }
    if cluster.storage_class:
        volume["class"] = cluster.storage_class
    pool = {
        "apiVersion": STRIMZI_API,
        "kind": "KafkaNodePool",
        "metadata": metadata(NODE_POOL, cluster.namespace, "kafka", **{CLUSTER_LABEL: cluster.name}),
        "spec": {
            "replicas": cluster.nodes,
            "roles": ["controller", "broker"],
            "storage": {"type": "jbod", "volumes": [volume]},
            "jvmOptions": {"-Xms": cluster.heap, "-Xmx": cluster.heap},
        },
    }
    rf, isr = cluster.replication_factor, cluster.min_insync_replicas
    kafka = {
        "apiVersion": STRIMZI_API,
        "kind": "Kafka",
        "metadata": metadata(cluster.name, cluster.namespace, "kafka"),
        "spec": {
            "kafka": {
                "version": cluster.version,
                "listeners": [{"name": LISTENER, "port": cluster.listener_port, "type": "internal", "tls": False}],
                "config": {
                    "default.replication.factor": rf,
                    "min.insync.replicas": isr,
                    "offsets.topic.replication.factor": rf,
                    "transaction.state.log.replication.factor": rf,
                    "transaction.state.log.min.isr": isr,
                    "num.partitions": cluster.default_partitions,
                },
            },
            "entityOperator": {"topicOperator": {}},
        },
    }
    return pool, kafka


def topic_documents(cluster: KafkaCluster) -> tuple[Document, ...]:
    """One KafkaTopic per topic, managed by Strimzi's topic operator."""
    documents = []
    for topic in cluster.topics:
        name = _kafka_name(topic.name)
        spec: Document = {
            "partitions": topic.partitions,
            "replicas": topic.replication_factor or cluster.replication_factor,
        }
        if name != topic.name:
            spec["topicName"] = topic.name
        if topic.configs:
            spec["config"] = dict(topic.configs)
        documents.append(
            {
                "apiVersion": STRIMZI_API,
                "kind": "KafkaTopic",
                "metadata": metadata(name, cluster.namespace, "kafka-topic", **{CLUSTER_LABEL: cluster.name}),
                "spec": spec,
            }
        )
    return tuple(documents)
