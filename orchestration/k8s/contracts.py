"""Hand-written JSON schemas of the fields esp relies on in documents no bundled schema covers.

Kubernetes' own kinds are checked against the schemas `kubernetes-validate` bundles. Strimzi's
custom resources and the dagster/dagster chart's values have schemas only in those projects'
repositories (the CRDs' openAPIV3Schema, the chart's values.schema.json), in no package that
installs here, so these schemas are esp's own: every key esp writes, with its type and the limits
the upstream schema sets (Strimzi's `kafka.strimzi.io/v1` CRDs at release 1.2.0; the chart's
pydantic models of Dagster 1.13), and the keys allowed beside them at each level esp writes, so a
misspelt key is caught. They are not the upstream schemas: a field esp does not write is not
checked. `cross_document_problems` adds what no per-document schema can say (a topic's replicas
against the brokers there are).
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
"""A Kubernetes object name (DNS-1123 subdomain)."""


def obj(
    properties: dict[str, Schema], required: tuple[str, ...] = (), also: tuple[str, ...] = (), closed: bool = True
) -> Schema:
    """An object with these properties (`required` among them) and, unchecked, the keys `also`; no
    other key when `closed`."""
    return {
        "type": "object",
        "properties": {**{key: {} for key in also}, **properties},
        "required": list(required),
        "additionalProperties": not closed,
    }


STRING: Schema = {"type": "string", "minLength": 1}
STRINGS: Schema = {"type": "array", "items": STRING}
LABELS: Schema = {"type": "object", "additionalProperties": {"type": "string"}}


def _metadata(*required_labels: str) -> Schema:
    labels = {**LABELS, "required": list(required_labels)}
    return obj(
        {"name": {"type": "string", "pattern": NAME, "maxLength": 253}, "namespace": STRING, "labels": labels},
        required=("name", "namespace", *(("labels",) if required_labels else ())),
        also=("annotations",),
    )


def _resource(kind: str, spec: Schema, *required_labels: str) -> Schema:
    return obj(
        {
            "apiVersion": {"const": "kafka.strimzi.io/v1"},
            "kind": {"const": kind},
            "metadata": _metadata(*required_labels),
            "spec": spec,
        },
        required=("apiVersion", "kind", "metadata", "spec"),
    )


_HEAP: Schema = {"type": "string", "pattern": "^[0-9]+[mMgG]?$"}
_JVM = obj({"-Xms": _HEAP, "-Xmx": _HEAP}, also=("-XX", "gcLoggingEnabled", "javaSystemProperties"))
_VOLUME = obj(
    {
        "id": {"type": "integer", "minimum": 0},
        "type": {"enum": ["ephemeral", "persistent-claim"]},
        "size": STRING,
        "class": STRING,
        "deleteClaim": {"type": "boolean"},
        "kraftMetadata": {"enum": ["shared"]},
    },
    required=("id", "type", "size"),
    also=("selector", "sizeLimit", "volumeAttributesClass"),
)
_CLUSTER = "strimzi.io/cluster"

KAFKA_NODE_POOL = _resource(
    "KafkaNodePool",
    obj(
        {
            "replicas": {"type": "integer", "minimum": 1},
            "roles": {
                "type": "array",
                "items": {"enum": ["controller", "broker"]},
                "minItems": 1,
                "uniqueItems": True,
            },
            "storage": obj(
                {"type": {"const": "jbod"}, "volumes": {"type": "array", "items": _VOLUME, "minItems": 1}},
                required=("type", "volumes"),
            ),
            "jvmOptions": _JVM,
        },
        required=("replicas", "roles", "storage"),
        also=("resources", "template"),
    ),
    _CLUSTER,
)

_BROKER_COUNT: Schema = {"type": "integer", "minimum": 1}
KAFKA = _resource(
    "Kafka",
    obj(
        {
            "kafka": obj(
                {
                    "version": {"type": "string", "pattern": r"^[0-9]+\.[0-9]+\.[0-9]+$"},
                    "listeners": {
                        "type": "array",
                        "minItems": 1,
                        "items": obj(
                            {
                                "name": {"type": "string", "pattern": "^[a-z0-9]{1,11}$"},
                                "port": {"type": "integer", "minimum": 9092, "not": {"enum": [9404, 9999]}},
                                "type": {"enum": ["internal", "cluster-ip", "nodeport", "loadbalancer", "route"]},
                                "tls": {"type": "boolean"},
                            },
                            required=("name", "port", "type", "tls"),
                            also=("authentication", "configuration", "networkPolicyPeers"),
                        ),
                    },
                    "config": obj(
                        {
                            "default.replication.factor": _BROKER_COUNT,
                            "min.insync.replicas": _BROKER_COUNT,
                            "offsets.topic.replication.factor": _BROKER_COUNT,
                            "transaction.state.log.replication.factor": _BROKER_COUNT,
                            "transaction.state.log.min.isr": _BROKER_COUNT,
                            "num.partitions": _BROKER_COUNT,
                        },
                        required=("default.replication.factor", "min.insync.replicas"),
                        closed=False,  # any other broker config Strimzi allows
                    ),
                },
                required=("listeners",),
                also=(
                    "metadataVersion",
                    "image",
                    "authorization",
                    "rack",
                    "brokerRackInitImage",
                    "livenessProbe",
                    "readinessProbe",
                    "jvmOptions",
                    "jmxOptions",
                    "metricsConfig",
                    "logging",
                    "template",
                    "tieredStorage",
                    "quotas",
                ),
            ),
            "entityOperator": obj(
                {"topicOperator": {"type": "object"}}, required=("topicOperator",), also=("userOperator", "template")
            ),
        },
        required=("kafka", "entityOperator"),
        also=("clusterCa", "clientsCa", "cruiseControl", "kafkaExporter", "maintenanceTimeWindows"),
    ),
)

KAFKA_TOPIC = _resource(
    "KafkaTopic",
    obj(
        {
            "topicName": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,249}$"},
            "partitions": {"type": "integer", "minimum": 1},
            "replicas": {"type": "integer", "minimum": 1, "maximum": 32767},
            "config": {"type": "object", "additionalProperties": {"type": ["string", "integer", "boolean"]}},
        },
        required=("partitions", "replicas"),
    ),
    _CLUSTER,
)

_PULL_POLICY: Schema = {"enum": ["Always", "IfNotPresent", "Never"]}
_IMAGE = obj({"repository": STRING, "tag": STRING, "pullPolicy": _PULL_POLICY}, required=("repository", "tag"))
_NAMED = obj({"name": STRING}, required=("name",), also=("optional",))
_USER_DEPLOYMENT = obj(
    {
        "name": {"type": "string", "pattern": NAME},
        "image": _IMAGE,
        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
        "dagsterApiGrpcArgs": STRINGS,
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "envSecrets": {"type": "array", "items": _NAMED},
        "envConfigMaps": {"type": "array", "items": _NAMED},
        "volumes": {"type": "array", "items": {"type": "object", "required": ["name"]}},
        "volumeMounts": {"type": "array", "items": {"type": "object", "required": ["name", "mountPath"]}},
        "includeConfigInLaunchedRuns": obj({"enabled": {"type": "boolean"}}, required=("enabled",)),
    },
    required=("name", "image", "port"),
    also=(
        "codeServerArgs",
        "annotations",
        "nodeSelector",
        "affinity",
        "tolerations",
        "podSecurityContext",
        "securityContext",
        "resources",
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "labels",
        "schedulerName",
    ),
)
_TAG_LIMIT = obj(
    {
        "key": STRING,
        "limit": {"type": "integer", "minimum": 0},
        "value": {
            "oneOf": [
                {"type": "string"},
                obj({"applyLimitPerUniqueValue": {"type": "boolean"}}, required=("applyLimitPerUniqueValue",)),
            ]
        },
    },
    required=("key", "limit"),
)
_THREADS = obj(
    {"useThreads": {"type": "boolean"}, "numWorkers": {"type": "integer", "minimum": 1}}, also=("numSubmitWorkers",)
)
_PURGE = obj({"purgeAfterDays": {"type": "object", "additionalProperties": {"type": "integer"}}})

DAGSTER_VALUES = obj(
    {
        "dagster-user-deployments": obj(
            {
                "enabled": {"const": True},
                "enableSubchart": {"type": "boolean"},
                "deployments": {"type": "array", "items": _USER_DEPLOYMENT, "minItems": 1},
            },
            required=("enabled", "deployments"),
            also=("imagePullSecrets",),
        ),
        "runLauncher": obj(
            {
                "type": {"const": "K8sRunLauncher"},
                "config": obj(
                    {
                        "k8sRunLauncher": obj(
                            {
                                "jobNamespace": STRING,
                                "loadInclusterConfig": {"type": "boolean"},
                                "imagePullPolicy": _PULL_POLICY,
                                "envSecrets": {"type": "array", "items": _NAMED},
                            },
                            also=(
                                "image",
                                "kubeconfigFile",
                                "envConfigMaps",
                                "envVars",
                                "volumeMounts",
                                "volumes",
                                "labels",
                                "failPodOnRunFailure",
                                "resources",
                                "runK8sConfig",
                            ),
                        )
                    },
                    required=("k8sRunLauncher",),
                ),
            },
            required=("type", "config"),
        ),
        "postgresql": obj(
            {
                "enabled": {"type": "boolean"},
                "postgresqlHost": {"type": "string"},
                "postgresqlUsername": STRING,
                "postgresqlPassword": STRING,
                "postgresqlDatabase": STRING,
                "service": obj({"port": {"type": "integer", "minimum": 1, "maximum": 65535}}, required=("port",)),
            },
            required=("enabled", "postgresqlUsername", "postgresqlPassword", "postgresqlDatabase"),
            also=("image", "postgresqlScheme", "postgresqlParams"),
        ),
        "generatePostgresqlPasswordSecret": {"type": "boolean"},
        "dagsterDaemon": obj(
            {
                "runCoordinator": obj(
                    {
                        "enabled": {"type": "boolean"},
                        "type": {"const": "QueuedRunCoordinator"},
                        "config": obj(
                            {
                                "queuedRunCoordinator": obj(
                                    {
                                        "maxConcurrentRuns": {"type": "integer", "minimum": 1},
                                        "dequeueIntervalSeconds": {"type": "integer", "minimum": 1},
                                        "tagConcurrencyLimits": {"type": "array", "items": _TAG_LIMIT},
                                    },
                                    also=("dequeueNumWorkers", "dequeueUseThreads"),
                                )
                            },
                            required=("queuedRunCoordinator",),
                        ),
                    },
                    required=("enabled", "type", "config"),
                ),
                "runMonitoring": obj(
                    {
                        "enabled": {"type": "boolean"},
                        "startTimeoutSeconds": {"type": "integer", "minimum": 1},
                        "pollIntervalSeconds": {"type": "integer", "minimum": 1},
                        "maxResumeRunAttempts": {"type": "integer", "minimum": 0},
                    }
                ),
                "sensors": _THREADS,
                "schedules": _THREADS,
            },
            also=(
                "enabled",
                "image",
                "heartbeatTolerance",
                "env",
                "envConfigMaps",
                "envSecrets",
                "resources",
                "runRetries",
                "volumes",
                "volumeMounts",
            ),
        ),
        "retention": obj({"enabled": {"type": "boolean"}, "sensor": _PURGE, "schedule": _PURGE}),
        "telemetry": obj({"enabled": {"type": "boolean"}}, required=("enabled",)),
    },
    required=("dagster-user-deployments", "runLauncher", "postgresql"),
    # The chart's other top-level values (DagsterHelmValues): allowed, not checked.
    also=(
        "dagsterWebserver",
        "generateCeleryConfigSecret",
        "rabbitmq",
        "redis",
        "flower",
        "ingress",
        "imagePullSecrets",
        "computeLogManager",
        "scheduler",
        "pythonLogs",
        "busybox",
        "migrate",
        "serviceAccount",
        "global",
        "concurrency",
        "additionalInstanceConfig",
    ),
)

CUSTOM_RESOURCES: dict[tuple[str, str], Schema] = {
    ("kafka.strimzi.io/v1", "Kafka"): KAFKA,
    ("kafka.strimzi.io/v1", "KafkaNodePool"): KAFKA_NODE_POOL,
    ("kafka.strimzi.io/v1", "KafkaTopic"): KAFKA_TOPIC,
}
"""Contract schemas by (apiVersion, kind)."""


def cross_document_problems(documents: list[dict[str, Any]]) -> list[str]:
    """What the Strimzi resources must agree on across documents: each node pool and topic names a
    Kafka that is there; topics and the cluster's defaults ask for no more replicas than there are
    brokers, and `min.insync.replicas` leaves one broker free to fail."""
    clusters = {d["metadata"]["name"]: d for d in documents if d.get("kind") == "Kafka"}
    brokers: dict[str, int] = {}
    problems = []
    for doc in documents:
        if doc.get("kind") not in {"KafkaNodePool", "KafkaTopic"}:
            continue
        cluster = doc.get("metadata", {}).get("labels", {}).get("strimzi.io/cluster")
        if cluster not in clusters:
            problems.append(f"{doc['kind']} {doc['metadata'].get('name')} names Kafka {cluster!r}, which is not there")
        elif doc["kind"] == "KafkaNodePool" and "broker" in doc["spec"].get("roles", []):
            brokers[cluster] = brokers.get(cluster, 0) + doc["spec"]["replicas"]
    for name, kafka in clusters.items():
        config = kafka["spec"]["kafka"].get("config", {})
        count = brokers.get(name, 0)
        rf, isr = config.get("default.replication.factor", 1), config.get("min.insync.replicas", 1)
        if not 1 <= rf <= count:
            problems.append(f"Kafka {name}: default.replication.factor {rf} with {count} broker(s)")
        if not isr < rf:
            problems.append(
                f"Kafka {name}: min.insync.replicas {isr} leaves no replica free to fail (replication {rf})"
            )
    for doc in documents:
        if doc.get("kind") == "KafkaTopic":
            cluster = doc["metadata"].get("labels", {}).get("strimzi.io/cluster")
            if cluster in clusters and doc["spec"].get("replicas", 1) > brokers.get(cluster, 0):
                problems.append(f"KafkaTopic {doc['metadata']['name']}: more replicas than the brokers of {cluster}")
    return problems
