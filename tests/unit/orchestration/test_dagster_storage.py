"""Dagster's storage as the settings say: SQLite under DAGSTER_HOME by default, esp's PostgreSQL with
`dagster_storage: postgres` (the rest of the instance config unchanged); and how esp finds and runs
the PostgreSQL programs."""

from __future__ import annotations

import stat

import pytest
import yaml

from orchestration.stack.dagster_home import prepare_dagster_home
from orchestration.stack.errors import StackError, ToolMissingError
from orchestration.stack.postgres import SERVER_PROGRAMS, find_bin_dir, server_account
from pipelines.settings import EspSettings, SettingsError
from tests.conftest import REPO_ROOT


def _rendered(tmp_path, **overrides) -> tuple[dict, str]:
    settings = EspSettings.load(None, project_root=REPO_ROOT, run_dir_name=str(tmp_path / "run"), **overrides)
    text = (prepare_dagster_home(settings) / "dagster.yaml").read_text()
    return yaml.safe_load(text), text


def test_sqlite_is_the_default_and_lives_in_dagster_home(tmp_path):
    assert EspSettings().dagster_storage == "sqlite"
    config, _ = _rendered(tmp_path)
    assert config["storage"] == {"sqlite": {"base_dir": str(tmp_path / "run" / "dagster" / "storage")}}


def test_postgres_storage_points_at_esps_server_and_keeps_the_rest(tmp_path):
    from dagster._core.instance.config import dagster_instance_config

    sqlite, _ = _rendered(tmp_path)
    config, text = _rendered(tmp_path, dagster_storage="postgres", postgres={"port": 5544})
    database = {"hostname": "127.0.0.1", "username": "postgres", "db_name": "dagster", "port": 5544}
    database["scheme"] = "postgresql+psycopg2"  # the driver dagster-postgres installs
    assert config["storage"] == {"postgres": {"postgres_db": database}}
    assert "password" not in text  # the server trusts loopback connections
    assert {k: v for k, v in config.items() if k != "storage"} == {k: v for k, v in sqlite.items() if k != "storage"}
    assert "# Fails runs stuck STARTING" in text  # the template's comments stay
    # Dagster's own schema accepts it (dagster-postgres's storage config), without connecting.
    validated, _ = dagster_instance_config(str(tmp_path / "run" / "dagster"))
    assert validated["storage"]["postgres"]["postgres_db"]["port"] == 5544


def test_an_unknown_storage_is_named(tmp_path):
    with pytest.raises(SettingsError, match="dagster_storage"):
        EspSettings.load(None, dagster_storage="mysql")


def _fake_programs(folder):
    folder.mkdir(parents=True)
    for program in SERVER_PROGRAMS:
        (folder / program).write_text("#!/bin/sh\n")
        (folder / program).chmod(stat.S_IRWXU)
    return folder


def test_the_newest_installed_version_wins_then_path(tmp_path):
    root = tmp_path / "lib"
    for version in ("9.6", "15", "10"):
        _fake_programs(root / version / "bin")
    (root / "16" / "bin").mkdir(parents=True)  # a version without its server programs
    assert find_bin_dir(None, search_root=root, path="") == root / "15" / "bin"
    on_path = _fake_programs(tmp_path / "elsewhere")
    assert find_bin_dir(None, search_root=tmp_path / "none", path=str(on_path)) == on_path
    assert find_bin_dir(on_path, search_root=root) == on_path


def test_missing_programs_say_how_to_install_them(tmp_path):
    with pytest.raises(ToolMissingError, match="apt-get install postgresql-15"):
        find_bin_dir(None, search_root=tmp_path, path="")
    with pytest.raises(ToolMissingError, match="postgres.bin_dir"):
        find_bin_dir(tmp_path, search_root=tmp_path, path="")


def test_only_root_switches_to_the_server_user():
    assert server_account("postgres", euid=1000) is None
    with pytest.raises(StackError, match="no-such-user-here"):
        server_account("no-such-user-here", euid=0)
    with pytest.raises(StackError, match="unprivileged"):
        server_account("root", euid=0)
