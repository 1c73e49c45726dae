"""Dagster on esp's own PostgreSQL: the server esp starts under a run folder holds a run that an
in-process job wrote through the rendered DAGSTER_HOME, a second instance reads it back, it survives a
stop and start (the data folder stays), and a stopped server leaves its port closed."""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, asset, materialize

from orchestration.stack.dagster_home import prepare_dagster_home
from orchestration.stack.errors import ToolMissingError
from orchestration.stack.postgres import DAGSTER_DB, HOST, SUPERUSER, find_bin_dir, postgres_server
from pipelines.settings import EspSettings, PostgresSettings
from tests.conftest import REPO_ROOT, free_port

pytestmark = pytest.mark.integration


@asset
def greeting() -> str:
    return "hello from postgres"


@pytest.fixture
def run_dir():
    """A run folder the server's user can reach: as root, PostgreSQL runs as `postgres`, and pytest's
    own tmp folders are private to their owner."""
    try:
        find_bin_dir(None)
    except ToolMissingError as missing:
        pytest.skip(f"the PostgreSQL server programs are absent here: {missing}")
    folder = Path(tempfile.mkdtemp(prefix="esp-postgres-"))
    folder.chmod(0o755)
    yield folder / "run"
    shutil.rmtree(folder, ignore_errors=True)


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((HOST, port)) == 0


def _stored_runs(port: int, run_id: str) -> int:
    import psycopg2

    with psycopg2.connect(host=HOST, port=port, user=SUPERUSER, dbname=DAGSTER_DB) as connection:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM runs WHERE run_id = %s", (run_id,))
            (count,) = cursor.fetchone()
    connection.close()
    return count


def _read_back(home: Path, run_id: str) -> None:
    reader = DagsterInstance.from_config(str(home))
    try:
        run = reader.get_run_by_id(run_id)
        assert run is not None and run.status == DagsterRunStatus.SUCCESS
        event = reader.get_latest_materialization_event(AssetKey("greeting"))
        assert event is not None and event.run_id == run_id
    finally:
        reader.dispose()


def test_a_run_is_stored_in_esps_postgres_and_read_back(run_dir):
    port = free_port()
    settings = EspSettings(
        project_root=REPO_ROOT,
        run_dir_name=str(run_dir),
        dagster_storage="postgres",
        postgres=PostgresSettings(port=port),
    )
    server = postgres_server(settings)
    try:
        state = server.up()
        assert state.running and state.answering and state.address == f"{HOST}:{port}"
        home = prepare_dagster_home(settings)

        writer = DagsterInstance.from_config(str(home))
        try:
            assert type(writer.run_storage).__name__ == "PostgresRunStorage"
            result = materialize([greeting], instance=writer)
            assert result.success
        finally:
            writer.dispose()
        assert _stored_runs(port, result.run_id) == 1
        _read_back(home, result.run_id)

        # Stopped, the data folder stays; started again (database creation is idempotent), the run is there.
        assert server.down()
        assert not _port_open(port)
        assert server.paths.initialised
        server.up()
        _read_back(home, result.run_id)
    finally:
        server.down()
    assert not _port_open(port)
    assert server.status().running is False
    assert server.down() is False


def test_infra_up_status_down_and_ui_follow_the_setting(run_dir):
    """`esp infra up` starts PostgreSQL with the broker, `status` shows it, `down` stops it after the
    broker, and `esp ui` refuses to start Dagster while it is down (real subprocesses, as typed)."""
    import json
    import subprocess
    import sys

    config = run_dir.parent / "esp.json"
    ports = {"client_port": free_port(), "controller_port": free_port(), "heap": "512m"}
    settings = {"run_dir_name": str(run_dir), "dagster_storage": "postgres", "postgres": {"port": free_port()}}
    config.write_text(json.dumps({**settings, "kafka": ports}))

    def esp(*args: str) -> subprocess.CompletedProcess:
        command = [str(Path(sys.executable).parent / "esp"), *args, "--config", str(config)]
        return subprocess.run(command, capture_output=True, text=True, timeout=180)

    try:
        up = esp("infra", "up")
        assert up.returncode == 0, up.stdout + up.stderr
        assert up.stdout.index("PostgreSQL is up") < up.stdout.index("Kafka is up")
        status = esp("infra", "status")
        assert status.returncode == 0 and "postgres" in status.stdout and "database dagster" in status.stdout
        down = esp("infra", "down")
        assert down.returncode == 0 and down.stdout.index("Kafka stopped") < down.stdout.index("PostgreSQL stopped")
        stopped = esp("infra", "status")
        assert stopped.returncode == 3 and "stopped" in stopped.stdout
        ui = esp("ui", "--port", str(free_port()))
        assert ui.returncode == 1 and "start it with `esp infra up`" in ui.stdout
    finally:
        esp("infra", "down")
