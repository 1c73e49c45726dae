"""DAGSTER_HOME under the run folder, with esp's instance config (infra/dagster.yaml)."""

from __future__ import annotations

import shutil
import string
from collections.abc import Mapping
from pathlib import Path

from pipelines.settings import EspSettings


def dagster_home(settings: EspSettings) -> Path:
    return settings.run_dir / "dagster"


def prepare_dagster_home(settings: EspSettings) -> Path:
    """Create DAGSTER_HOME and render dagster.yaml into it (storage paths under the run folder)."""
    home = dagster_home(settings)
    home.mkdir(parents=True, exist_ok=True)
    template = string.Template((settings.project_root / "infra" / "dagster.yaml").read_text())
    (home / "dagster.yaml").write_text(template.safe_substitute(dagster_home=str(home)))
    return home


def dagster_env(settings: EspSettings, base: Mapping[str, str]) -> dict[str, str]:
    """The environment for dagster processes: DAGSTER_HOME, project root, GX analytics off."""
    env = dict(base)
    env["DAGSTER_HOME"] = str(dagster_home(settings))
    env["ESP_PROJECT_ROOT"] = str(settings.project_root)
    env["GX_ANALYTICS_ENABLED"] = "false"
    venv_bin = settings.project_root / ".venv" / "bin"
    if venv_bin.is_dir() and shutil.which("dagster", path=str(venv_bin)):
        env["PATH"] = f"{venv_bin}:{env.get('PATH', '')}"
    return env
