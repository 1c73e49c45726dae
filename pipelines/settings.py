"""Typed settings for the data plane: where Kafka is, how Spark starts, where files go.

Every option has a default and a one-line description. Nothing here reads the environment when
imported; `EspSettings.load` reads an optional YAML/JSON file when it is called.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class SettingsError(ValueError):
    """A configuration file or value that esp cannot use; the message names the problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaSettings(_Strict):
    """The local KRaft broker esp starts, and how clients reach it."""

    host: str = Field("127.0.0.1", description="Address the broker binds to and clients dial.")
    client_port: int = Field(9092, ge=1, le=65535, description="Port of the PLAINTEXT client listener.")
    controller_port: int = Field(9093, ge=1, le=65535, description="Port of the KRaft controller listener.")
    heap: str = Field("512m", description="JVM heap for the broker (-Xmx and -Xms).")
    start_timeout_s: float = Field(60.0, gt=0, description="How long `infra up` waits for the broker to answer.")
    default_partitions: int = Field(4, ge=1, description="Partitions of topics created without an explicit count.")

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.client_port}"


class SparkSettings(_Strict):
    """How the one Spark session of a process is built."""

    master: str = Field("local[*]", description="spark.master: local[*] by default, or a cluster URL.")
    app_name: str = Field("esp", description="Spark application name shown in the Spark UI.")
    ui_enabled: bool = Field(True, description="Start the Spark web UI, read-only (its kill links are off).")
    ui_host: str = Field("127.0.0.1", description="Address the Spark web UI binds to (the driver's SPARK_LOCAL_IP).")
    shuffle_partitions: int = Field(8, ge=1, description="spark.sql.shuffle.partitions for batch and streaming plans.")
    driver_memory: str = Field("2g", description="spark.driver.memory (only takes effect before the JVM starts).")
    driver_host: str = Field("127.0.0.1", description="Address the Spark driver binds to and advertises.")
    python_executable: str | None = Field(
        None, description="Python of the Spark workers; default: the driver's own interpreter."
    )
    conf: dict[str, str] = Field(default_factory=dict, description="Any further Spark conf, applied last.")


class EspSettings(_Strict):
    """All esp settings; `project_root` anchors the ignored run and cache folders."""

    project_root: Path = Field(
        default_factory=Path.cwd, description="Repository root; run and cache folders live under it."
    )
    run_dir_name: str = Field(
        ".esp/run", description="Folder (under project_root) for broker data, logs, pid files, DAGSTER_HOME."
    )
    jars_dir_name: str = Field(".esp/jars", description="Folder (under project_root) holding the Maven-resolved jars.")
    kafka: KafkaSettings = Field(default_factory=KafkaSettings, description="The Kafka broker.")
    spark: SparkSettings = Field(default_factory=SparkSettings, description="The Spark session.")

    @property
    def run_dir(self) -> Path:
        return self.project_root / self.run_dir_name

    @property
    def jars_dir(self) -> Path:
        return self.project_root / self.jars_dir_name

    @classmethod
    def load(cls, path: Path | None = None, **overrides: object) -> EspSettings:
        """Settings from an optional YAML or JSON file, then keyword overrides."""
        data: dict = {}
        if path is not None:
            data = _read_settings_file(path)
        data.update(overrides)
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            where = f" in {path}" if path else ""
            raise SettingsError(f"invalid esp settings{where}: {err}") from err


def _read_settings_file(path: Path) -> dict:
    if not path.is_file():
        raise SettingsError(f"settings file {path} does not exist")
    text = path.read_text()
    try:
        if path.suffix in {".yaml", ".yml"}:
            import yaml

            loaded = yaml.safe_load(text) or {}
        else:
            loaded = json.loads(text)
    except Exception as err:  # both parsers raise their own error types
        raise SettingsError(f"settings file {path} is not valid {path.suffix.lstrip('.')}: {err}") from err
    if not isinstance(loaded, dict):
        raise SettingsError(f"settings file {path} must hold a mapping at the top level")
    return loaded
