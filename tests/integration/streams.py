"""Helpers for stream tests: produce records, wait for a stream to catch up, run `esp stream`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipelines.kafka_topics import end_offsets


def produce(bootstrap: str, topic: str, values: list[bytes | str], key: bytes | None = None) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=10, max_request_size=4 * 1024 * 1024)
    for value in values:
        producer.send(topic, key=key, value=value.encode() if isinstance(value, str) else value)
    producer.flush()
    producer.close()


def wait_for_checkpoint(checkpoint: str, topic: str, bootstrap: str, timeout_s: float = 180, process=None) -> None:
    """Until the query's last committed batch reached the topic's current end offsets."""
    from pipelines.streams.metrics import checkpoint_offsets

    # Probes keep arriving, so the target is the end as of now, not a moving one.
    target = end_offsets(bootstrap, topic)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the stream process exited with {process.returncode}")
        done = checkpoint_offsets(checkpoint, topic)
        if all(done.get(p, -1) >= end for p, end in target.items()):
            return
        time.sleep(0.5)
    raise AssertionError("the stream did not catch up with the topic in time")


def committed_batches(checkpoint: str) -> int:
    commits = Path(checkpoint) / "commits"
    return len(list(commits.glob("[0-9]*"))) if commits.is_dir() else 0


def config_for(tmp_path: Path, bootstrap: str) -> Path:
    host, port = bootstrap.split(":")
    path = tmp_path / "esp.json"
    path.write_text(
        json.dumps(
            {
                "run_dir_name": str(tmp_path / "run"),
                "kafka": {"host": host, "client_port": int(port)},
                "spark": {"master": "local[2]", "ui_enabled": False, "shuffle_partitions": 4},
            }
        )
    )
    return path


def start_stream(config: Path, log: Path, *args: str) -> subprocess.Popen:
    esp = str(Path(sys.executable).parent / "esp")
    return subprocess.Popen(
        [esp, "stream", "run", "--config", str(config), *args],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def kill_group(process: subprocess.Popen, sig: int = signal.SIGKILL, timeout_s: float = 60) -> None:
    """Signal the stream's whole process group (driver, JVM, Python workers) and reap it."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        return
    process.wait(timeout=timeout_s)
    if sig != signal.SIGKILL:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # stragglers of a graceful stop
        except ProcessLookupError:
            pass
