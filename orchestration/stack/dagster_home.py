"""DAGSTER_HOME under the run folder, with esp's instance config (infra/dagster.yaml).

The template's storage is SQLite under DAGSTER_HOME; with `dagster_storage: postgres` its `storage:`
block is replaced by one on esp's own PostgreSQL server (orchestration/stack/postgres.py), the rest
of the template (run queue, monitoring, retention) and its comments staying as they are.
"""

from __future__ import annotations

import re
import shutil
import string
from collections.abc import Mapping
from pathlib import Path

import yaml

from orchestration.stack.errors import StackError
from orchestration.stack.postgres import dagster_storage
from pipelines.settings import EspSettings

# The template's top-level `storage:` key and its indented lines, up to the next blank or top-level line.
_STORAGE_BLOCK = re.compile(r"^storage:\n(?:[ \t]+\S.*\n)+", re.MULTILINE)


def dagster_home(settings: EspSettings) -> Path:
    return settings.run_dir / "dagster"


def prepare_dagster_home(settings: EspSettings) -> Path:
    """Create DAGSTER_HOME and render dagster.yaml into it: storage under the run folder (SQLite) or
    on esp's PostgreSQL server, as `settings.dagster_storage` says."""
    home = dagster_home(settings)
    home.mkdir(parents=True, exist_ok=True)
    template = string.Template((settings.project_root / "infra" / "dagster.yaml").read_text())
    rendered = template.safe_substitute(dagster_home=str(home))
    if settings.dagster_storage == "postgres":
        rendered = _with_storage(rendered, dagster_storage(settings))
    (home / "dagster.yaml").write_text(rendered)
    return home


def _with_storage(config: str, storage: Mapping[str, object]) -> str:
    block = yaml.safe_dump({"storage": storage}, sort_keys=False)
    replaced, count = _STORAGE_BLOCK.subn(lambda _: block, config)
    if count != 1:
        raise StackError(f"infra/dagster.yaml must hold one top-level `storage:` block to replace, found {count}")
    return replaced


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
