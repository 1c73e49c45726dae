"""The elastic loop on the real stack: Kafka, a Spark stream, the Dagster daemon, sensor and rescale runs.

A word-count stream (`esp stream run`, its stage I/O-bound at a few ms per record, Spark with
enough task slots) starts on 1 channel. A code location holding only this stream's elasticity
domain (sensor every 5 s, a 15 s SLO) runs under `dagster dev`, whose daemon ticks the sensor.
A step up in load overloads the channel: the sensor requests a rescale run, the run asks the
stream, the stream migrates at a batch boundary and goes on. A fall in load scales it back in.
Ticks (with their skip reasons) and runs are read back through Dagster's GraphQL API; at the
end the stream's results equal the batch oracle over everything in the topic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestration.names import (
    RESCALE_ACTION_TAG,
    RESCALE_REASON_TAG,
    RESCALE_RULE_TAG,
    RESCALE_TAG,
    elasticity_sensor_name,
    resize_job_name,
)
from pipelines.streams.names import checkpoint_path, elastic_path, results_table_path
from tests.conftest import REPO_ROOT, free_port
from tests.integration.streams import committed_batches, kill_group, start_stream, wait_for_checkpoint

pytestmark = pytest.mark.e2e

SERVICE_MS = 4.0  # one channel carries at most 250 words/s, less the batch overhead
HIGH_RPS = 300
LOW_RPS = 20
SKEWED_RPS = 400  # channel 0 gets ~70%: more than its 250 words/s; channel 1 is busy about half the time
SLO_S = 15.0  # a micro-batch costs seconds of fixed work on a busy 2-core machine

DEFS_TEMPLATE = """
from dagster import DefaultSensorStatus, Definitions

from orchestration.elasticity.definitions import elasticity_definitions
from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.resources import EspSettingsResource
from orchestration.streams.catalog import StreamEntry

ENTRY = StreamEntry(name={name!r}, job="wordcount", input_topic={topic!r}, load_kind="words")
POLICY = ElasticityPolicy(
    slo_s={slo}, sample_period_s=5.0, probe_timeout_s={timeout}, max_channels=6, rescale_timeout_s=180.0
)
defs = Definitions.merge(
    elasticity_definitions([ENTRY], interval_s=5, policy=POLICY, default_status=DefaultSensorStatus.RUNNING),
    Definitions(resources={{"esp_settings": EspSettingsResource(config_file={config!r})}}),
)
"""

RUNS_QUERY = """query Runs($job: String!) {
  runsOrError(filter: {pipelineName: $job}) { ... on Runs { results { runId status tags { key value } } } }
}"""
TICKS_QUERY = """{ repositoriesOrError { ... on RepositoryConnection { nodes { sensors {
  name sensorState { status ticks(limit: 200) { status skipReason runIds } } } } } } }"""


def spread_words(sent: int) -> str:
    return f"w{(sent * 7919) % 500}"


class PacedProducer(threading.Thread):
    """One-word lines at an adjustable rate (by default words w0..w499 in turn), until stopped."""

    def __init__(self, bootstrap: str, topic: str, word: Callable[[int], str] = spread_words) -> None:
        super().__init__(daemon=True)
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
        self.topic = topic
        self.word = word
        self.rate = 0.0
        self.sent = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        due = 0.0
        while not self.stop_event.wait(0.1):
            due += self.rate * 0.1
            while self.sent < due:
                self.producer.send(self.topic, value=self.word(self.sent).encode())
                self.sent += 1
        self.producer.flush()
        self.producer.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["data"]


def rescale_runs(port: int, job: str) -> list[dict]:
    runs = graphql(port, RUNS_QUERY, {"job": job})["runsOrError"]["results"]
    return [{**r, "tags": {t["key"]: t["value"] for t in r["tags"]}} for r in runs]


def sensor_ticks(port: int, name: str) -> list[dict]:
    for repository in graphql(port, TICKS_QUERY)["repositoriesOrError"]["nodes"]:
        for sensor in repository["sensors"]:
            if sensor["name"] == name:
                return sensor["sensorState"]["ticks"]
    return []


def wait_for_run(port: int, name: str, action: str | None, processes: list[subprocess.Popen], timeout_s: float) -> dict:
    """Stream `name`'s newest successful rescale run with this action (None: any); fails fast on a
    failed run or a dead process."""
    job = resize_job_name(name)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for process in processes:
            assert process.poll() is None, f"{process.args[:3]} exited with {process.returncode}"
        runs = rescale_runs(port, job)
        failed = [r for r in runs if r["status"] == "FAILURE"]
        assert not failed, f"rescale run failed: {failed}"
        done = [r for r in runs if r["status"] == "SUCCESS" and action in (None, r["tags"].get(RESCALE_ACTION_TAG))]
        if done:
            return done[0]
        time.sleep(3)
    recent = [
        t["skipReason"] for t in sensor_ticks(port, elasticity_sensor_name(name))[:8]
    ]  # newest first: why the sensor held
    raise AssertionError(
        f"no successful {action} run within {timeout_s:.0f} s; runs: {rescale_runs(port, job)}; last ticks: {recent}"
    )


def wait_for_batches(checkpoint: str, at_least: int, process: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while committed_batches(checkpoint) < at_least:
        assert process.poll() is None, "the stream exited early"
        assert time.monotonic() < deadline, "the stream committed no batch in time"
        time.sleep(1)


def wait_for_ui(port: int, process: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "dagster dev exited early"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise AssertionError("the Dagster webserver did not answer in time")


def _settings_file(tmp_path: Path, bootstrap: str) -> Path:
    host, port = bootstrap.split(":")
    config = tmp_path / "esp.json"
    config.write_text(
        json.dumps(
            {
                "project_root": str(REPO_ROOT),
                "run_dir_name": str(tmp_path / "run"),
                "kafka": {"host": host, "client_port": int(port)},
                # Task slots for every channel: the I/O-bound stage's channels then run side by side.
                "spark": {"master": "local[6]", "ui_enabled": False, "shuffle_partitions": 4},
            }
        )
    )
    return config


def _start_dagster(tmp_path: Path, config: Path, name: str, topic: str) -> tuple[subprocess.Popen, int]:
    from orchestration.stack.dagster_home import dagster_env, prepare_dagster_home
    from orchestration.stack.project import load_settings

    settings = load_settings(config)
    prepare_dagster_home(settings)  # dagster.yaml with the esp/rescale tag concurrency limit
    defs_file = tmp_path / "elastic_defs.py"
    defs_file.write_text(DEFS_TEMPLATE.format(name=name, topic=topic, config=str(config), slo=SLO_S, timeout=3 * SLO_S))
    port = free_port()
    dagster = str(Path(sys.executable).parent / "dagster")
    process = subprocess.Popen(
        [dagster, "dev", "-f", str(defs_file), "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO_ROOT,
        stdout=open(tmp_path / "dagster.log", "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**dagster_env(settings, os.environ), "ESP_CONFIG": str(config)},
    )
    return process, port


@dataclass
class ElasticStack:
    """A running stream, its Dagster (sensor + rescale runs) and a paced producer."""

    name: str
    topic: str
    root: Path
    stream: subprocess.Popen
    dagster: subprocess.Popen
    port: int
    load: PacedProducer

    def wait_for_run(self, action: str | None, timeout_s: float) -> dict:
        return wait_for_run(self.port, self.name, action, [self.stream, self.dagster], timeout_s)

    def drain(self, bootstrap: str) -> None:
        """Stop the load and wait until the stream committed everything in the topic."""
        self.load.stop()
        wait_for_checkpoint(checkpoint_path(self.root), self.topic, bootstrap, timeout_s=240, process=self.stream)


@contextmanager
def elastic_stack(
    tmp_path: Path, bootstrap: str, topic: str, channels: int, word: Callable[[int], str] = spread_words
) -> Iterator[ElasticStack]:
    """Start a word-count stream on `channels` channels and Dagster with its elasticity sensor;
    once both run and the stream committed two batches (the cold start), yield; stop all after."""
    name = f"elastic_{uuid.uuid4().hex[:6]}"
    config = _settings_file(tmp_path, bootstrap)
    stream = start_stream(
        config,
        tmp_path / "stream.log",
        *("--name", name, "--topic", topic, "--channels", str(channels), "--trigger", "1"),
        *("--max-offsets", "4000", "--service-ms", str(SERVICE_MS), "--observe-every", "5"),
    )
    dagster, port = _start_dagster(tmp_path, config, name, topic)
    stack = ElasticStack(
        name, topic, tmp_path / "run" / "streams" / name, stream, dagster, port, PacedProducer(bootstrap, topic, word)
    )
    stack.load.start()
    try:
        wait_for_ui(port, dagster)
        wait_for_batches(checkpoint_path(stack.root), 2, stream)
        yield stack
    finally:
        stack.load.stop()
        kill_group(stream, signal.SIGTERM)
        os.killpg(dagster.pid, signal.SIGTERM)
        try:
            dagster.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(dagster.pid, signal.SIGKILL)


def assert_results_exact(spark, bootstrap: str, stack: ElasticStack) -> None:
    """Every word the producer sent is counted once in the stream's results (the batch oracle)."""
    from pipelines import kafka_io
    from pipelines.jobs.wordcount import batch_oracle
    from tests.results import latest_word_counts

    expected = batch_oracle(kafka_io.read_batch(spark, bootstrap, stack.topic))
    assert sum(expected.values()) == stack.load.sent
    assert latest_word_counts(spark, results_table_path(stack.root)) == expected


def test_sensor_scales_out_under_a_step_up_and_in_after_a_fall_with_exact_results(
    spark, bootstrap, topic_factory, tmp_path
):
    from elasticity.migration import LayoutRegistry
    from elasticity.state import Location

    topic = topic_factory("elastic", partitions=4)
    with elastic_stack(tmp_path, bootstrap, topic, channels=1) as stack:
        name, load = stack.name, stack.load
        load.rate = HIGH_RPS  # the step comes after the cold start
        scaled_out = stack.wait_for_run("scale_out", timeout_s=240)
        assert scaled_out["tags"][RESCALE_TAG] == name
        assert scaled_out["tags"][RESCALE_RULE_TAG].startswith("P1")

        load.rate = LOW_RPS
        scaled_in = stack.wait_for_run("scale_in", timeout_s=300)
        assert scaled_in["tags"][RESCALE_RULE_TAG].startswith(("P2", "P5"))

        ticks = sensor_ticks(stack.port, elasticity_sensor_name(name))
        requested = {run_id for t in ticks for run_id in t["runIds"]}
        assert {scaled_out["runId"], scaled_in["runId"]} <= requested
        reasons = [t["skipReason"] or "" for t in ticks if t["status"] == "SKIPPED"]
        assert any("p99" in r and "SLO 15,000 ms" in r for r in reasons), reasons[:10]
        stack.drain(bootstrap)

    root = stack.root
    registry = LayoutRegistry(Location.of(elastic_path(root)))
    history = [registry.load(e).n_channels for e in range(registry.committed().epoch + 1)]
    assert history[0] == 1 and max(history) > 1 and history[-1] < max(history), history
    assert_results_exact(spark, bootstrap, stack)


def zipf_words_hot_in_channel_0(
    vocabulary: int = 400, hot: int = 10, s: float = 1.1, seed: int = 5
) -> Callable[[int], str]:
    """Words drawn from a Zipf law whose `hot` most frequent words all hash to channel 0 of a
    2-channel layout, half of them to each half that splitting channel 0 makes (so a split can
    divide the work, and a scale-out is not what the load needs)."""
    import random

    from elasticity.hashing import hash_str
    from elasticity.layout import Layout

    before = Layout.uniform(2)
    after = before.split(0)
    candidates = [f"w{i}" for i in range(5 * vocabulary)]
    halves = {
        c: [w for w in candidates if before.owner(hash_str(w)) == 0 and after.owner(hash_str(w)) == c] for c in (0, 2)
    }
    hottest = [w for pair in zip(halves[0], halves[2], strict=False) for w in pair][:hot]
    ranked = hottest + [w for w in candidates if w not in hottest][: vocabulary - hot]
    weights = [1.0 / (rank**s) for rank in range(1, vocabulary + 1)]
    draws = random.Random(seed).choices(ranked, weights=weights, k=200_000)
    return lambda sent: draws[sent % len(draws)]


def test_sensor_splits_the_hot_channel_of_a_zipf_load_with_exact_results(spark, bootstrap, topic_factory, tmp_path):
    """Zipf-skewed words whose hottest keys saturate channel 0 of 2: every channel's probes are
    late (a micro-batch waits for its slowest task), and the sensor splits channel 0 because it
    is busy several times as long as the other (not a uniform scale-out); results stay exact."""
    from elasticity.migration import LayoutRegistry
    from elasticity.state import Location

    topic = topic_factory("skewed", partitions=4)
    with elastic_stack(tmp_path, bootstrap, topic, channels=2, word=zipf_words_hot_in_channel_0()) as stack:
        stack.load.rate = SKEWED_RPS
        stack.wait_for_run(None, timeout_s=300)
        first = rescale_runs(stack.port, resize_job_name(stack.name))[-1]  # newest first
        stack.drain(bootstrap)
    root = stack.root

    tags = first["tags"]
    # The reason first: pytest shortens a long tag dict, and it is what says why no split came.
    assert tags[RESCALE_ACTION_TAG] == "split", tags.get(RESCALE_REASON_TAG, tags)
    assert "channel 0 was busy" in tags[RESCALE_REASON_TAG] and "skew" in tags[RESCALE_REASON_TAG], tags
    registry = LayoutRegistry(Location.of(elastic_path(root)))
    assert registry.load(1).n_channels == 3 and registry.load(1).channels[:2] == registry.load(0).channels
    assert_results_exact(spark, bootstrap, stack)
