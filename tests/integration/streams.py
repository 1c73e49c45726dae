"""Helpers for stream tests: produce records, wait for a stream to catch up, run `esp stream`."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipelines.kafka_topics import end_offsets
from pipelines.settings import KafkaConnection, kafka_connection


def produce(bootstrap: KafkaConnection | str, topic: str, values: list[bytes | str], key: bytes | None = None) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        **kafka_connection(bootstrap).client_kwargs(), linger_ms=10, max_request_size=4 * 1024 * 1024
    )
    for value in values:
        producer.send(topic, key=key, value=value.encode() if isinstance(value, str) else value)
    producer.flush()
    producer.close()


def wait_for_checkpoint(
    checkpoint: str, topic: str, bootstrap: KafkaConnection | str, timeout_s: float = 180, process=None, query=None
) -> None:
    """Until the query's last committed batch reached the topic's current end offsets (fails at
    once when the stream `process` exited or the in-process `query` ended)."""
    from pipelines.streams.metrics import checkpoint_offsets

    # Probes keep arriving, so the target is the end as of now, not a moving one.
    target = end_offsets(bootstrap, topic)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the stream process exited with {process.returncode}")
        if query is not None and not query.isActive:
            raise AssertionError(f"the stream's query ended: {query.exception()}")
        done = checkpoint_offsets(checkpoint, topic)
        if all(done.get(p, -1) >= end for p, end in target.items()):
            return
        time.sleep(0.5)
    raise AssertionError("the stream did not catch up with the topic in time")


def committed_batches(checkpoint: str) -> int:
    from elasticity.state import Location
    from pipelines.streams.metrics import checkpoint_batch_ids

    return len(checkpoint_batch_ids(Location.of(checkpoint).child("commits")))


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


_STARTED: list[subprocess.Popen] = []
"""Every stream a test started, so one a failed assertion left running is killed after the test."""


def start_stream(config: Path, log: Path, *args: str, cwd: Path | None = None) -> subprocess.Popen:
    """`esp stream run` in its own process group (from working directory `cwd`, default this one)."""
    esp = str(Path(sys.executable).parent / "esp")
    process = subprocess.Popen(
        [esp, "stream", "run", "--config", str(config), *args],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=cwd,
    )
    _STARTED.append(process)
    return process


def kill_leftover_streams() -> int:
    """SIGKILL the process group of every stream started here that is still running; how many.

    A test that fails between starting a stream and stopping it would otherwise leave the driver,
    its Spark JVM and Python workers running for the rest of the session (seen: a crash test's
    stream still consuming CPU minutes after its test failed)."""
    killed = 0
    while _STARTED:
        process = _STARTED.pop()
        if process.poll() is None:
            kill_group(process)
            killed += 1
    return killed


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


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL a process and every descendant it still has, whatever their process groups, and reap it.

    For commands that start services of their own (`esp soak`: a broker, two streams, `dagster
    dev`, each in a group of its own): killing only the command would leave them running, taking
    the CPU the rest of the session needs (a CI run whose short soak timed out then failed the
    next tests too)."""
    import psutil

    if process.poll() is not None:  # ended and reaped: its pid may belong to another process now
        return
    try:
        root = psutil.Process(process.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for member in tree:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=60)
    process.wait(timeout=60)


def read_topic(bootstrap: KafkaConnection | str, topic: str) -> list:
    """Every record of `topic` up to its end offsets now (ConsumerRecords), partition by partition."""
    from kafka import KafkaConsumer, TopicPartition

    end = end_offsets(bootstrap, topic)
    consumer = KafkaConsumer(
        **kafka_connection(bootstrap).client_kwargs(), enable_auto_commit=False, max_partition_fetch_bytes=8 << 20
    )
    try:
        partitions = [TopicPartition(topic, p) for p in end]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        records: list = []
        while any(consumer.position(tp) < end[tp.partition] for tp in partitions):
            for batch in consumer.poll(timeout_ms=1000).values():
                records.extend(r for r in batch if r.offset < end[r.partition])
        return records
    finally:
        consumer.close()


def dead_letters(bootstrap: str, topic: str) -> dict[str, str]:
    """Dead letters by source position (`topic:partition:offset`) → reason (a replayed batch
    may repeat a letter; the position keeps one)."""
    letters = (json.loads(r.value) for r in read_topic(bootstrap, topic))
    return {f"{d['source_topic']}:{d['source_partition']}:{d['source_offset']}": d["reason"] for d in letters}


def produce_records(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> list[str]:
    """Produce (key, value) records one partition at a time; their positions `topic:partition:offset`."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=10, max_request_size=4 * 1024 * 1024)
    try:
        futures = [producer.send(topic, key=key, value=value) for key, value in records]
        producer.flush()
        return [f"{topic}:{m.partition}:{m.offset}" for m in (f.get(timeout=60) for f in futures)]
    finally:
        producer.close()


def rescale_while_producing(stream, channels: int, bootstrap: str, records: list[str], timeout_s: float = 120) -> None:
    """Ask the in-process `stream` for `channels`, then produce `records` to its input: the stream
    applies the request at the next batch's boundary (a batch runs only when records arrive)."""
    from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleTarget

    request = RescaleRequest(target=RescaleTarget(op="scale_to", channels=channels))
    control = ControlChannel(stream.spec.control_dir)
    control.request(request)
    produce(bootstrap, stream.spec.input_topic, records)
    result = control.wait_for_result(request.request_id, timeout_s)
    assert result.status == "committed", result


def kill_and_restart(
    process: subprocess.Popen, config: Path, log: Path, *args: str, kills: int = 2, every_s: float = 3.0
) -> subprocess.Popen:
    """SIGKILL the stream `kills` times, `every_s` after each (re)start, restarting it with the same
    arguments each time; the last process."""
    for _ in range(kills):
        time.sleep(every_s)
        kill_group(process, signal.SIGKILL)
        process = start_stream(config, log, *args)
    return process


def run_esp(config: Path, *args: str, timeout_s: float = 400) -> subprocess.CompletedProcess:
    """An esp command with this settings file, its output captured; its tables as wide as their rows
    (no cell wrapped onto a second line, so a test can find a row's words on one line)."""
    esp = str(Path(sys.executable).parent / "esp")
    return subprocess.run(
        [esp, *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "COLUMNS": "200"},
    )


def clicks_in_event_time_order(count: int, offset: int = 0, pages: int = 6) -> list[str]:
    """Click records for the sessions jobs, in event-time order (1.5 s apart on average, 40 users);
    a later `offset` is later in event time."""
    rng = random.Random(offset)
    t, clicks = 1_760_000_000_000 + offset * 3_000, []
    for _ in range(count):
        t += rng.randint(0, 3_000)
        click = {"user_id": f"u{rng.randrange(40)}", "page": f"p{rng.randrange(pages)}", "event_time": t}
        clicks.append(json.dumps(click))
    return clicks
