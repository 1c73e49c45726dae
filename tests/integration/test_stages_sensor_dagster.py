"""The multi-stage sensor in a real control room: `dagster dev` (webserver, daemon, code server)
watches a two-stage stream whose second stage is the bottleneck, and under a steady load that
stage's As-Stream prediction requests the stage's own resize run, which the daemon launches and
the stream answers, growing that stage only.

What the unit tests of `stages_sensor` do with fakes, here with every real part: the sensor reads
both stages' metrics topics and the Kafka offsets, the run is launched by the daemon under the
stage's tag, and the stream commits the stage's new layout.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from benchmarks.multistage_job import BUCKETS_STAGE
from benchmarks.soak_dagster import ENDED, ControlRoom
from pipelines.streams.names import FIRST_STAGE, checkpoint_path, stage_paths
from tests.integration.streams import committed_batches, config_for, kill_group, start_stream
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.long]

STREAM = "twostage"
JOB = "benchmarks.multistage_job:two_stage_job"
LINES_PER_S = 100
WORDS_PER_LINE = 3  # unique words: stage main's selectivity is about 1, buckets gets ~300 rows/s
BUCKETS_MS_PER_ROW = 8.0  # ~125 rows/s per channel: one channel cannot keep up


def _committed_channels(root: Path, stage: str) -> list[int]:
    """The channels of each layout the stage committed, first to last."""
    from elasticity.migration import LayoutRegistry
    from elasticity.state import Location

    registry = LayoutRegistry(Location.of(stage_paths(root, stage).elastic))
    return [registry.load(epoch).n_channels for epoch in range(registry.committed().epoch + 1)]


def _produce_steadily(bootstrap: str, topic: str, stop: threading.Event) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    word = 0
    try:
        while not stop.is_set():
            started = time.monotonic()
            for _ in range(LINES_PER_S):
                producer.send(topic, " ".join(f"w{word + i}" for i in range(WORDS_PER_LINE)).encode())
                word += WORDS_PER_LINE
            producer.flush()
            stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))
    finally:
        producer.close()


def test_the_bottleneck_stage_is_grown_by_its_own_resize_run_launched_by_the_sensor(tmp_path, bootstrap, topic_factory):
    from orchestration.elasticity.decisions import read_decision

    topic = topic_factory("twostage", partitions=2)
    config = config_for(tmp_path, bootstrap)
    root = tmp_path / "run" / "streams" / STREAM  # the catalog's folder for the stream
    stream = start_stream(
        config,
        tmp_path / "stream.log",
        *("--name", STREAM, "--job", JOB, "--topic", topic, "--root", str(root)),
        *("--channels", "1", "--trigger", "2", "--stage-service-ms", f"{BUCKETS_STAGE}={BUCKETS_MS_PER_ROW}"),
    )
    room = ControlRoom(tmp_path, config, STREAM, topic, job=JOB)
    stop = threading.Event()
    load = threading.Thread(target=_produce_steadily, args=(bootstrap, topic, stop), daemon=True)
    try:
        room.start()  # the stages sensor is on by default in this room
        load.start()
        wait_for("the stream's first batch", lambda: committed_batches(checkpoint_path(root)) > 0, 240)
        runs = wait_for(
            "a resize run of stage buckets requested by the sensor",
            lambda: [r for r in room.resize_runs(BUCKETS_STAGE) if r.by_sensor],
            300,
            poll_s=2,
        )
        run = runs[-1]  # the first one (newest first)
        status = room.wait_for_status(run.run_id, ENDED, 300, stage=BUCKETS_STAGE)
        assert status == "SUCCESS", f"resize run {run.run_id} is {status}; see {room.log}"
        layouts = _committed_channels(root, BUCKETS_STAGE)
        assert layouts[0] == 1 and layouts[1] > 1, f"stage buckets' layouts: {layouts}; see {tmp_path / 'stream.log'}"
        decision = read_decision(stage_paths(root, BUCKETS_STAGE).control)
        assert decision is not None and decision.rescale and decision.rule.startswith("as-stream"), decision
        # Every rescale of the first stage (if its lag asked for one) went through its own job.
        assert len(_committed_channels(root, FIRST_STAGE)) <= 1 + len(room.resize_runs(FIRST_STAGE))
        assert stream.poll() is None, f"the stream exited; see {tmp_path / 'stream.log'}"
    finally:
        stop.set()
        load.join(timeout=10)
        room.stop()
        kill_group(stream)
