"""A benchmark's stream in its own process: `esp stream run` in a process group of its own (so a
SIGKILL takes its JVM and Python workers with it), with a settings file of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path


def stream_settings_file(settings, folder: Path, slots: int, bootstrap: str | None = None) -> Path:
    """A settings file for the stream process: the same broker (or `bootstrap`), Spark with
    `slots` task slots and no UI."""
    data = settings.to_file_data()
    if bootstrap is not None:
        host, port = bootstrap.rsplit(":", 1)
        data["kafka"] = {**data.get("kafka", {}), "host": host, "client_port": int(port)}
    data["spark"]["master"] = f"local[{slots}]"
    data["spark"]["ui_enabled"] = False
    path = folder / "esp-stream.json"
    path.touch(mode=0o600)  # it may hold the Kafka password
    path.write_text(json.dumps(data))
    return path


def start_stream_process(config: Path, log: Path, *args: str) -> subprocess.Popen:
    """`esp stream run --config <config> <args>`, output appended to `log`."""
    esp = str(Path(sys.executable).parent / "esp")
    return subprocess.Popen(
        [esp, "stream", "run", "--config", str(config), *args],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_stream_process(process: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Signal the stream's process group and reap it (SIGKILL if a graceful stop hangs)."""
    try:
        os.killpg(process.pid, sig)
        process.wait(timeout=90)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
