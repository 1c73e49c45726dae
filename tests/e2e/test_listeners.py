"""The whole stack started as a user starts it (`esp infra up`, `esp ui`, a stream run launched
through the UI) listens on loopback only: no socket of its processes in LISTEN state on another
address. The settings are the defaults but for free ports and a small Spark master, so the Spark UI
is on, as a user gets it."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from orchestration.names import op_name, stream_asset_key, stream_job_name
from pipelines.streams.names import checkpoint_path
from tests.conftest import free_port
from tests.e2e.dagster_ui import TERMINATE, graphql, launch, running_ui_process, wait_for_status
from tests.integration.streams import committed_batches, produce

pytestmark = pytest.mark.e2e

ESP = str(Path(sys.executable).parent / "esp")


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def listeners(pids: set[int]) -> list[tuple[int, str, str, int]]:
    """(pid, process name, address, port) of every TCP socket in LISTEN state of these processes."""
    found = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            connections = process.net_connections(kind="tcp")
            name = process.name()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        found += [(pid, name, c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN]
    return found


def with_descendants(pid: int) -> set[int]:
    try:
        return {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def esp(config: Path, *args: str) -> None:
    result = subprocess.run([ESP, *args, "--config", str(config)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def _stream_run_config(topic: str) -> dict:
    config = {"channels": 2, "trigger_seconds": 1.0, "observe_every_s": 2.0, "input_topic": topic}
    return {"ops": {op_name(stream_asset_key("wordcount")): {"config": config}}}


def test_no_listener_of_the_stack_on_a_non_loopback_address(tmp_path):
    settings = {
        "kafka": {"client_port": free_port(), "controller_port": free_port(), "heap": "512m"},
        # Defaults otherwise (the Spark UI on): a small master only because the machine is shared.
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    }
    # The file `esp ui` is given (see running_ui), so `esp infra up` starts the broker it uses.
    config = tmp_path / "esp-ui.json"
    config.write_text(json.dumps({"run_dir_name": str(tmp_path / "run"), **settings}))
    bootstrap = f"127.0.0.1:{settings['kafka']['client_port']}"
    checkpoint = Path(checkpoint_path(tmp_path / "run" / "streams" / "wordcount"))
    esp(config, "infra", "up")
    try:
        esp(config, "topics", "create", "words", "-p", "2")
        produce(bootstrap, "words", [f"alpha beta w{i % 20}" for i in range(200)])
        broker_pid = int((tmp_path / "run" / "kafka" / "broker.pid").read_text())
        with running_ui_process(tmp_path, settings) as (port, ui_pid):
            run_id = launch(port, stream_job_name("wordcount"), _stream_run_config("words"))
            wait_for_status(port, run_id, {"STARTED"})
            # A committed batch: the run's Spark session (driver, block manager, UI) is up.
            deadline = time.monotonic() + 300
            while committed_batches(str(checkpoint)) == 0:
                assert time.monotonic() < deadline, "the stream committed no batch"
                assert wait_for_status(port, run_id, {"STARTED", "FAILURE", "CANCELED"}) == "STARTED"
                time.sleep(2)
            found = listeners({broker_pid} | with_descendants(ui_pid))
            graphql(port, TERMINATE, {"id": run_id})
            wait_for_status(port, run_id, {"CANCELED", "FAILURE", "SUCCESS"})
    finally:
        esp(config, "infra", "down")

    ports = {p for _, _, _, p in found}
    # The broker's two listeners, the webserver and the stream's Spark UI were all seen.
    assert {settings["kafka"]["client_port"], settings["kafka"]["controller_port"], port} <= ports, found
    assert any(name == "java" and p >= 4040 and p < 4100 for _, name, _, p in found), found
    exposed = [entry for entry in found if not is_loopback(entry[2])]
    assert not exposed, f"listening beyond loopback (pid, process, address, port): {exposed}"
