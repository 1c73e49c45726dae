"""The settings that exist only on Kubernetes: namespace, image, storage class, replicas, sizes.

They sit beside esp's own settings (`pipelines.settings.EspSettings`, which stay as they are) in a
file of their own, `esp k8s render --k8s FILE`; every option has a default and a description.
Nothing is said twice: what esp's settings already say (the executors' bounds,
`spark.executors.*`; their size, `spark_cluster.*`) is taken from them, not repeated here.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipelines.settings import SettingsError

DNS_LABEL = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"
"""A Kubernetes object name short enough to prefix the names derived from it (RFC 1035 label)."""

QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$"
"""A Kubernetes resource quantity: 500m, 2, 3Gi."""


def _dagster_version() -> str:
    # The chart's versions follow Dagster's: the chart of the Dagster esp pins.
    return metadata.version("dagster")


class KubernetesSettings(BaseModel):
    """Where and how esp's pieces run on a Kubernetes cluster; `EspSettings` says what they are."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kubernetes_version: str = Field(
        "1.34", pattern=r"^1\.[0-9]+$", description="Kubernetes API version the manifests are written and checked for."
    )
    namespace: str = Field("esp", pattern=DNS_LABEL, description="Namespace of every object esp renders.")
    image_repository: str = Field(
        "esp", min_length=1, description="esp's container image (Spark 4 with esp and its venv), without tag."
    )
    image_tag: str = Field(
        "0.1.0", min_length=1, description="Tag of esp's image: one per build, not `latest` (Dagster pins runs to it)."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="When nodes pull esp's image: driver, executor and Dagster user-code pods."
    )
    image_project_root: str = Field(
        "/opt/esp", pattern=r"^/", description="esp's checkout inside the image: streams.yaml, .esp/jars resolved."
    )
    image_python: str = Field(
        "/opt/esp/.venv/bin/python", pattern=r"^/", description="The image's Python with esp installed (workers too)."
    )
    spark_service_account: str = Field(
        "esp-spark", pattern=DNS_LABEL, description="ServiceAccount of the stream drivers, allowed to manage executors."
    )
    streams: tuple[str, ...] = Field(
        ("wordcount",),
        min_length=1,
        description="Catalogued streams (built in or streams.yaml), each run by a driver pod.",
    )
    state_root: str = Field(
        "s3a://esp-state/streams",
        pattern=r"^s3a?://[^/]+(/.*)?$",
        description="Object-store folder of the stream roots: stream NAME lives in <state_root>/NAME.",
    )
    object_store_endpoint: str | None = Field(
        None,
        pattern=r"^https?://[^/?#]+/?$",
        description="S3-compatible endpoint as pods reach it (e.g. http://minio.storage.svc:9000); "
        "unset: object_store.endpoint_url of esp's settings.",
    )
    object_store_secret: str = Field(
        "esp-object-store", pattern=DNS_LABEL, description="Secret holding AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY."
    )
    driver_cpu: str = Field("1", pattern=QUANTITY, description="CPU request of a stream driver's pod.")
    driver_memory: str = Field(
        "3Gi", pattern=QUANTITY, description="Memory of a stream driver's pod: spark.driver.memory plus Python."
    )
    storage_class: str | None = Field(
        None, min_length=1, description="StorageClass of the Kafka volumes; unset: the cluster's default."
    )
    kafka_cluster: str = Field("esp", pattern=DNS_LABEL, description="Name of the Strimzi Kafka cluster.")
    kafka_version: str = Field(
        "4.3.1",
        pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$",
        description="Kafka version Strimzi runs (one its release supports).",
    )
    kafka_replicas: int = Field(
        3, ge=3, description="KRaft nodes (broker and controller each) of the Kafka cluster; replication stays 3."
    )
    kafka_storage_size: str = Field("20Gi", pattern=QUANTITY, description="Persistent volume size of each Kafka node.")
    dagster_chart_version: str = Field(
        default_factory=_dagster_version, description="Version of the dagster/dagster chart: Dagster's, as pinned."
    )

    @model_validator(mode="after")
    def _consistent(self) -> KubernetesSettings:
        if len(set(self.streams)) < len(self.streams):
            raise ValueError(f"streams {list(self.streams)} names a stream twice")
        return self

    @property
    def image(self) -> str:
        """The image reference pods run: repository:tag."""
        return f"{self.image_repository}:{self.image_tag}"

    @property
    def kafka_bootstrap_host(self) -> str:
        """The Service Strimzi puts in front of the brokers, as clients in the cluster resolve it."""
        return f"{self.kafka_cluster}-kafka-bootstrap.{self.namespace}.svc"

    @classmethod
    def load(cls, path: Path | None = None) -> KubernetesSettings:
        """Settings from an optional YAML or JSON file, else the defaults."""
        if path is None:
            return cls()
        if not path.is_file():
            raise SettingsError(f"Kubernetes settings file {path} does not exist")
        try:
            text = path.read_text()
            data = yaml.safe_load(text) if path.suffix in {".yaml", ".yml"} else json.loads(text)
        except (yaml.YAMLError, json.JSONDecodeError) as err:
            raise SettingsError(f"Kubernetes settings file {path} is not valid: {err}") from err
        try:
            return cls.model_validate(data or {})
        except ValidationError as err:
            raise SettingsError(f"invalid Kubernetes settings in {path}: {err}") from err
