"""`esp infra up/status/down` on a real broker, as a user types them (a real subprocess)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from orchestration.stack.ports import free_port
from tests.integration.streams import run_esp as esp

pytestmark = pytest.mark.integration


@pytest.fixture
def config_file(tmp_path) -> Path:
    path = tmp_path / "esp.json"
    path.write_text(
        json.dumps(
            {
                "run_dir_name": str(tmp_path / "run"),
                "kafka": {"client_port": free_port(), "controller_port": free_port(), "heap": "512m"},
            }
        )
    )
    return path


def test_up_status_down_twice_in_a_row(config_file):
    try:
        for _ in range(2):
            up = esp(config_file, "infra", "up")
            assert up.returncode == 0, up.stdout + up.stderr
            assert "Kafka is up" in up.stdout

            again = esp(config_file, "infra", "up")
            assert again.returncode == 0
            assert "already running" in again.stdout

            status = esp(config_file, "infra", "status")
            assert status.returncode == 0 and "running" in status.stdout

            down = esp(config_file, "infra", "down")
            assert down.returncode == 0 and "Kafka stopped" in down.stdout

            stopped = esp(config_file, "infra", "status")
            assert stopped.returncode == 3 and "stopped" in stopped.stdout
    finally:
        esp(config_file, "infra", "down")


def test_a_taken_port_is_named(config_file):
    port = json.loads(config_file.read_text())["kafka"]["client_port"]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = esp(config_file, "infra", "up")
    assert result.returncode == 1
    assert f"port {port}" in result.stdout and "taken" in result.stdout


def test_a_stale_pid_file_is_reported_and_cleared(config_file, tmp_path):
    pid_file = tmp_path / "run" / "kafka" / "broker.pid"
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text("999999")
    status = esp(config_file, "infra", "status")
    assert status.returncode == 3 and "stale pid file" in status.stdout
    down = esp(config_file, "infra", "down")
    assert "not running" in down.stdout
    assert not pid_file.exists()


def test_commands_against_a_stopped_broker_say_so(config_file):
    result = esp(config_file, "topics", "list")
    assert result.returncode == 1
    assert "no Kafka broker answers" in result.stdout
