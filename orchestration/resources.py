"""Dagster resources of esp: settings, the Spark session and Kafka, each configurable in the UI."""

from __future__ import annotations

from typing import Any

from dagster import ConfigurableResource, InitResourceContext
from dagster_pyspark import PySparkResource
from pydantic import Field, PrivateAttr, field_validator

from orchestration.launchpad_spark import allowed_master, allowed_spark_conf
from pipelines.settings import EspSettings, KafkaConnection


class EspSettingsResource(ConfigurableResource):
    """Where esp's settings come from; every other resource reads them through this."""

    config_file: str | None = Field(None, description="esp settings file (YAML/JSON); default: built-in defaults.")

    def load(self) -> EspSettings:
        from pathlib import Path

        from orchestration.stack.project import load_settings

        return load_settings(Path(self.config_file) if self.config_file else None)


class EspSparkResource(PySparkResource):
    """dagster-pyspark's resource, built by esp's one session factory so the Kafka jars are on it.

    Its config comes from the launchpad, so it may only tune the session: Spark keys from an
    allowlist and a local master (orchestration.launchpad_spark); the rest is the settings file's.
    """

    spark_config: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra Spark conf, applied last; only keys of launchpad_spark.ALLOWED_SPARK_KEYS (README).",
    )
    master: str | None = Field(
        None, description="spark.master: local, local[N] or local[*]; default: the settings' (local[*])."
    )
    settings: EspSettingsResource = Field(default_factory=EspSettingsResource, description="esp settings.")

    _session: Any = PrivateAttr(default=None)

    @field_validator("spark_config")
    @classmethod
    def _only_allowed_keys(cls, conf: dict[str, Any]) -> dict[str, Any]:
        allowed_spark_conf(conf)  # raises naming the refused key
        return conf

    def setup_for_execution(self, context: InitResourceContext) -> None:
        from pipelines.spark_session import build_spark_session

        settings = self.settings.load()
        spark = settings.spark.model_copy(
            update={
                "master": allowed_master(self.master, settings.spark.master),
                "conf": {**settings.spark.conf, **allowed_spark_conf(self.spark_config)},
            }
        )
        # The streams' folder decides the store: on an object store the session gets the s3a connector.
        self._session = build_spark_session(settings.model_copy(update={"spark": spark}), (settings.streams_folder,))

    @property
    def spark_session(self) -> Any:
        return self._session


class KafkaResource(ConfigurableResource):
    """The Kafka cluster the streams read and write.

    SASL/TLS settings come from the settings file when a run asks for the connection, never from
    resource config: the UI shows resource config, and a password must not appear there.
    """

    bootstrap_servers: str | None = Field(None, description="host:port list; default: the settings' local broker.")
    settings: EspSettingsResource = Field(default_factory=EspSettingsResource, description="esp settings.")

    def connection(self) -> KafkaConnection:
        kafka = self.settings.load().kafka
        override = self.bootstrap_servers
        # The launchpad can set bootstrap_servers: it must not send the settings' login elsewhere.
        if override and override != kafka.bootstrap_servers and kafka.security.uses_sasl:
            raise ValueError(
                f"the kafka resource's bootstrap_servers {override!r} differs from the settings' "
                f"{kafka.bootstrap_servers!r}, and SASL credentials are configured: set kafka.host and "
                "kafka.client_port in the settings file instead"
            )
        return KafkaConnection(override or kafka.bootstrap_servers, kafka.security)
