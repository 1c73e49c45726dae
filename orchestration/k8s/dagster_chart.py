"""Dagster on Kubernetes through its official Helm chart (`dagster/dagster`): the chart's values.

The chart runs the webserver and the daemon; esp's code runs as the chart's one user-code
deployment (a gRPC code server from esp's image, what workspace.yaml loads locally); runs are
Kubernetes Jobs (K8sRunLauncher) from the same image, with the code location's settings file and
object-store Secret; Dagster's storage is the chart's PostgreSQL. The instance settings esp relies
on (the queued run coordinator with its one-rescale-per-stream tag limit, run monitoring, sensor
and schedule threads, tick retention, telemetry off) are taken from `infra/dagster.yaml`, the
instance config `esp ui` renders locally, so both stay one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestration.k8s.objects import Document
from orchestration.k8s.settings import KubernetesSettings
from orchestration.k8s.spark import SETTINGS_DIR, SETTINGS_PATH
from orchestration.stack.postgres import DAGSTER_DB
from pipelines.settings import EspSettings, SettingsError

CODE_SERVER_PORT = 3030
SETTINGS_CONFIG_MAP = "esp-dagster"
"""The ConfigMap holding the settings file of the code location and of the runs it launches."""

POSTGRES_PASSWORD_PLACEHOLDER = "CHANGE-ME"
"""Never a real password: set one at install (`--set postgresql.postgresqlPassword=...`)."""


@dataclass(frozen=True)
class CodeLocation:
    """What workspace.yaml loads: a module's attribute, under a location name."""

    name: str
    module: str
    attribute: str


@dataclass(frozen=True)
class InstanceConfig:
    """The parts of esp's Dagster instance config (infra/dagster.yaml) that the chart's values carry."""

    run_coordinator: dict[str, Any]
    run_monitoring: dict[str, Any]
    sensors: dict[str, Any]
    schedules: dict[str, Any]
    retention: dict[str, Any]
    telemetry: bool


def _read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise SettingsError(f"{path} does not exist: `esp k8s render` reads it from the project root")
    return yaml.safe_load(path.read_text())


def code_location(project_root: Path) -> CodeLocation:
    """The one code location of the project's workspace.yaml."""
    path = project_root / "workspace.yaml"
    entries = (_read_yaml(path) or {}).get("load_from") or []
    modules = [entry["python_module"] for entry in entries if isinstance(entry, dict) and "python_module" in entry]
    if len(modules) != 1:
        raise SettingsError(f"{path} must load exactly one python_module, found {len(modules)}")
    module = modules[0]
    return CodeLocation(name=module["location_name"], module=module["module_name"], attribute=module["attribute"])


def instance_config(project_root: Path) -> InstanceConfig:
    """esp's instance settings, from infra/dagster.yaml."""
    config = _read_yaml(project_root / "infra" / "dagster.yaml") or {}
    return InstanceConfig(
        run_coordinator=(config.get("run_coordinator") or {}).get("config") or {},
        run_monitoring=config.get("run_monitoring") or {},
        sensors=config.get("sensors") or {},
        schedules=config.get("schedules") or {},
        retention=config.get("retention") or {},
        telemetry=bool((config.get("telemetry") or {}).get("enabled", False)),
    )


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def _camel_keys(mapping: dict[str, Any]) -> dict[str, Any]:
    """snake_case keys of dagster.yaml as the chart's camelCase values (one level)."""
    return {_camel(key): value for key, value in mapping.items()}


def _daemon(instance: InstanceConfig) -> Document:
    queued = _camel_keys(instance.run_coordinator)
    if "tagConcurrencyLimits" in queued:
        queued["tagConcurrencyLimits"] = [_camel_keys(limit) for limit in queued["tagConcurrencyLimits"]]
    monitoring = {
        _camel(key): value
        for key, value in instance.run_monitoring.items()
        if key in {"enabled", "start_timeout_seconds", "poll_interval_seconds", "max_resume_run_attempts"}
    }
    return {
        "runCoordinator": {"enabled": True, "type": "QueuedRunCoordinator", "config": {"queuedRunCoordinator": queued}},
        "runMonitoring": monitoring,
        "sensors": _camel_keys(instance.sensors),
        "schedules": _camel_keys(instance.schedules),
    }


def _retention(instance: InstanceConfig) -> Document:
    kinds = {kind: instance.retention[kind] for kind in ("sensor", "schedule") if kind in instance.retention}
    return {
        "enabled": bool(kinds),
        **{kind: {"purgeAfterDays": cfg["purge_after_days"]} for kind, cfg in kinds.items()},
    }


def helm_values(settings: EspSettings, k8s: KubernetesSettings) -> Document:
    """The values of the dagster/dagster chart for esp."""
    location = code_location(settings.project_root)
    instance = instance_config(settings.project_root)
    secret = [{"name": k8s.object_store_secret}]
    settings_volume = "esp-settings"
    deployment = {
        "name": location.name,
        "image": {"repository": k8s.image_repository, "tag": k8s.image_tag, "pullPolicy": k8s.image_pull_policy},
        # `dagster api grpc`: workspace.yaml's module and attribute, in esp's checkout (streams.yaml is read there).
        "dagsterApiGrpcArgs": ["-m", location.module, "-a", location.attribute, "-d", k8s.image_project_root],
        "port": CODE_SERVER_PORT,
        "env": {"ESP_CONFIG": SETTINGS_PATH},
        "envSecrets": secret,
        "volumes": [{"name": settings_volume, "configMap": {"name": SETTINGS_CONFIG_MAP}}],
        "volumeMounts": [{"name": settings_volume, "mountPath": SETTINGS_DIR, "readOnly": True}],
        # Runs launched from this location get its env, Secrets and volumes.
        "includeConfigInLaunchedRuns": {"enabled": True},
    }
    return {
        "dagster-user-deployments": {"enabled": True, "enableSubchart": True, "deployments": [deployment]},
        "runLauncher": {
            "type": "K8sRunLauncher",
            "config": {
                "k8sRunLauncher": {
                    "jobNamespace": k8s.namespace,
                    "loadInclusterConfig": True,
                    "imagePullPolicy": k8s.image_pull_policy,
                    "envSecrets": secret,
                }
            },
        },
        "postgresql": {
            "enabled": True,
            "postgresqlUsername": "dagster",
            "postgresqlPassword": POSTGRES_PASSWORD_PLACEHOLDER,
            "postgresqlDatabase": DAGSTER_DB,
            "service": {"port": 5432},
        },
        "generatePostgresqlPasswordSecret": True,
        "dagsterDaemon": _daemon(instance),
        "retention": _retention(instance),
        "telemetry": {"enabled": instance.telemetry},
    }
