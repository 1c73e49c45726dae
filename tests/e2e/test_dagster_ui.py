"""`esp ui` starts the real Dagster webserver + daemon, and the UI's GraphQL API sees esp's assets."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ASSETS_QUERY = "{ assetNodes { assetKey { path } } }"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _wait_for_ui(port: int, process: subprocess.Popen, timeout_s: float = 150) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "esp ui exited early"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise AssertionError("the Dagster webserver did not answer in time")


def test_esp_ui_serves_the_code_location(tmp_path):
    port = _free_port()
    config = tmp_path / "esp.json"
    config.write_text(json.dumps({"run_dir_name": str(tmp_path / "run")}))
    esp = str(Path(sys.executable).parent / "esp")
    log = open(tmp_path / "ui.log", "w")
    process = subprocess.Popen(
        [esp, "ui", "--port", str(port), "--config", str(config)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "ESP_CONFIG": str(config)},
    )
    try:
        _wait_for_ui(port, process)
        deadline = time.monotonic() + 60
        keys: list = []
        while time.monotonic() < deadline and not keys:
            nodes = graphql(port, ASSETS_QUERY).get("data", {}).get("assetNodes") or []
            keys = [n["assetKey"]["path"] for n in nodes]
            time.sleep(1)
        assert ["kafka_topic_inventory"] in keys
        assert (tmp_path / "run" / "dagster" / "dagster.yaml").is_file()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()
