"""One writer per stream, black-box through `esp stream run`: a second driver is refused naming
the first (before it starts Spark), on a local folder and on an object store (the lease object,
`cluster` marker: the s3a connector's JVM start is slow), and a driver started after the first one
was SIGKILLed takes over; a stream start is refused while an offline rescale holds the stream."""

from __future__ import annotations

import json
import signal
import time

import pytest

from elasticity.lease import acquire, read_holder
from pipelines.streams.names import checkpoint_path, elastic_path
from tests.integration.streams import committed_batches, config_for, kill_group, produce, start_stream

pytestmark = pytest.mark.integration


def _args(topic: str, root) -> list[str]:
    return ["--name", "one-writer", "--job", "wordcount", "--topic", topic, "--root", str(root), "--channels", "2"]


@pytest.mark.parametrize("store", ["local", pytest.param("s3a", marks=pytest.mark.cluster)])
def test_a_second_driver_is_refused_the_first_keeps_running_and_a_successor_takes_over_after_a_sigkill(
    store, bootstrap, topic_factory, tmp_path, request
):
    topic = topic_factory("one-writer", partitions=2)
    produce(bootstrap, topic, [f"x y{i % 20}" for i in range(500)])
    config = config_for(tmp_path, bootstrap)
    if store == "s3a":
        request.getfixturevalue("s3a_jars")
    root = tmp_path / "stream" if store == "local" else request.getfixturevalue("s3_root").replace("s3:", "s3a:")
    first = start_stream(config, tmp_path / "first.log", *_args(topic, root), "--trigger", "0.5")
    try:
        deadline = time.monotonic() + 180
        while committed_batches(checkpoint_path(root)) < 1:
            assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "first.log").read_text()[-2000:]
            time.sleep(0.5)
        # The second driver's Spark master cannot start: it must be refused before it tries.
        unstartable = json.loads(config.read_text())
        unstartable["spark"]["master"] = "spark://127.0.0.1:9"
        second_config = tmp_path / "second.json"
        second_config.write_text(json.dumps(unstartable))
        second = start_stream(second_config, tmp_path / "second.log", *_args(topic, root))
        assert second.wait(timeout=180) != 0
        refusal = (tmp_path / "second.log").read_text()
        assert f"held by pid {first.pid}" in refusal and "stream driver of one-writer" in refusal, refusal[-2000:]
        before = committed_batches(checkpoint_path(root))
        produce(bootstrap, topic, [f"after {i}" for i in range(100)])
        deadline = time.monotonic() + 120
        while committed_batches(checkpoint_path(root)) <= before:
            assert first.poll() is None and time.monotonic() < deadline, "the first driver stopped"
            time.sleep(0.5)
        token = read_holder(elastic_path(root)).token
        kill_group(first, signal.SIGKILL)  # its lease is not released: the successor must see it is dead
        successor = start_stream(config, tmp_path / "successor.log", *_args(topic, root), "--trigger", "0.5")
        try:
            produce(bootstrap, topic, [f"later {i}" for i in range(100)])
            before, deadline = committed_batches(checkpoint_path(root)), time.monotonic() + 180
            while committed_batches(checkpoint_path(root)) <= before:
                assert successor.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "successor.log"
                ).read_text()[-2000:]
                time.sleep(0.5)
            assert read_holder(elastic_path(root)).token == token + 1
        finally:
            kill_group(successor, signal.SIGKILL)
    finally:
        kill_group(first, signal.SIGKILL)


def test_a_stream_start_is_refused_while_an_offline_rescale_holds_it(bootstrap, topic_factory, tmp_path):
    topic = topic_factory("one-writer-offline", partitions=2)
    config, root = config_for(tmp_path, bootstrap), tmp_path / "stream"
    lease = acquire(elastic_path(root), "offline rescale of one-writer")
    assert lease is not None
    try:
        driver = start_stream(config, tmp_path / "driver.log", *_args(topic, root))
        assert driver.wait(timeout=180) != 0
        refusal = (tmp_path / "driver.log").read_text()
        assert "offline rescale of one-writer" in refusal, refusal[-2000:]
    finally:
        lease.release()
