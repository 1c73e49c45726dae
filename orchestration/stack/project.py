"""Locating the project and building the stack objects from settings (called, never at import)."""

from __future__ import annotations

import os
from pathlib import Path

from orchestration.stack.jvm import JvmLayout
from orchestration.stack.kafka_broker import KafkaBroker
from pipelines.settings import EspSettings, Profile

SETTINGS_ENV = "ESP_CONFIG"
PROFILE_ENV = "ESP_PROFILE"
ROOT_ENV = "ESP_PROJECT_ROOT"


def find_project_root(start: Path | None = None) -> Path:
    """The nearest folder holding infra/jvm/pom.xml, from ESP_PROJECT_ROOT, `start` or the cwd."""
    if explicit := os.environ.get(ROOT_ENV):
        return Path(explicit).resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "infra" / "jvm" / "pom.xml").is_file():
            return folder
    # An installed (non-editable) package still knows the checkout it was built from.
    return Path(__file__).resolve().parents[2]


def load_settings(config: Path | None = None, profile: Profile | None = None) -> EspSettings:
    """Settings from --config, else $ESP_CONFIG, else defaults; rooted at the project. The profile:
    `profile` (a command's --profile), else $ESP_PROFILE, else the file's (`local` by default).

    The object store's endpoint, region (and the local server's keys) are exported to this
    process's AWS variables here, once: every reader of a stream folder on the store (commands,
    sensors, assets, the processes they start) then reaches the store the streams write to."""
    path = config or (Path(os.environ[SETTINGS_ENV]) if os.environ.get(SETTINGS_ENV) else None)
    chosen = profile or os.environ.get(PROFILE_ENV) or None
    settings = EspSettings.load(path, **({"profile": chosen} if chosen else {}))
    settings.object_store.export(os.environ)
    if "project_root" not in settings.model_fields_set:
        settings = settings.model_copy(update={"project_root": find_project_root()})
    return settings


def jvm_layout(settings: EspSettings) -> JvmLayout:
    return JvmLayout(project_root=settings.project_root, jars_dir=settings.jars_dir)


def kafka_broker(settings: EspSettings) -> KafkaBroker:
    return KafkaBroker(settings.kafka, settings.run_dir, jvm_layout(settings))
