"""The real stack the browser tests look at: Kafka (the session's broker), `esp ui` (webserver +
daemon + the esp code location) on a free port, and the word-count stream running as a Dagster
run under a steady load. One stack serves every browser test of a session."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from orchestration.names import (
    CODE_LOCATION,
    elasticity_sensor_name,
    op_name,
    resize_job_name,
    stream_asset_key,
    stream_job_name,
)
from pipelines.streams.names import checkpoint_path, elastic_path
from tests.e2e.dagster_ui import (
    LAUNCH,
    TERMINATE,
    graphql,
    launch,
    running_ui_process,
    wait_for_status,
    wait_for_success,
)
from tests.integration.streams import committed_batches, produce
from tests.waiting import wait_for

T = TypeVar("T")

STREAM = "wordcount"
TOPIC = "words"  # the catalogue's topic: the elasticity sensor reads this stream's lag there
CHANNELS = 2
# The code server answers the daemon's "start this run" within Dagster's 60 s only on an idle
# machine; past it the run fails before it starts (DagsterUserCodeUnreachableError).
UI_ENV = {"DAGSTER_GRPC_TIMEOUT_SECONDS": "300"}

SENSOR_STATE = """query($selector: SensorSelector!) { sensorOrError(sensorSelector: $selector) {
  ... on Sensor { sensorState { id selectorId status } } } }"""
STOP_SENSOR = """mutation($origin: String!, $selector: String!) {
  stopSensor(jobOriginId: $origin, jobSelectorId: $selector) { __typename } }"""
START_SENSOR = """mutation($selector: SensorSelector!) { startSensor(sensorSelector: $selector) { __typename } }"""
ACTIVE_RUNS = """query($job: String!) { runsOrError(filter: {pipelineName: $job,
  statuses: [QUEUED, NOT_STARTED, STARTING, STARTED, CANCELING]}) { ... on Runs { results { runId } } } }"""
ENDED = {"SUCCESS", "FAILURE", "CANCELED"}


class SteadyLoad(threading.Thread):
    """Word lines into the stream's topic, a few hundred records a second, until stopped."""

    def __init__(self, bootstrap: str, topic: str, lines_per_tick: int = 100, tick_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.lines_per_tick, self.tick_s = lines_per_tick, tick_s
        self.stopping = threading.Event()

    def run(self) -> None:
        sent = 0
        while not self.stopping.wait(self.tick_s):
            produce(self.bootstrap, self.topic, [f"alpha beta w{(sent + j) % 200}" for j in range(self.lines_per_tick)])
            sent += self.lines_per_tick

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)


@dataclass
class Stack:
    """What a browser test needs to know of the running stack."""

    port: int
    folder: Path
    bootstrap: str
    stream_run_id: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stream_root(self) -> Path:
        return self.folder / "run" / "streams" / STREAM

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        return graphql(self.port, query, variables)

    def launch(self, job: str, run_config: dict, selector: dict | None = None) -> str:
        """A run of `job` (or of the given selection, e.g. asset checks) through the API; its id."""
        if selector is None:
            return launch(self.port, job, run_config)
        params = {"selector": selector, "runConfigData": run_config}
        result = self.graphql(LAUNCH, {"params": params})["launchRun"]
        assert result["__typename"] == "LaunchRunSuccess", result
        return result["run"]["runId"]

    def wait_for_status(self, run_id: str, wanted: set[str], timeout_s: float = 180) -> str:
        return wait_for_status(self.port, run_id, wanted, timeout_s)

    def wait_for_success(self, run_id: str, timeout_s: float = 180, name: str = "run") -> None:
        """Wait for the run to end in success; otherwise fail with its error events."""
        wait_for_success(self.port, run_id, timeout_s, name)

    def sensor_selector(self, name: str) -> dict:
        return {"repositoryLocationName": CODE_LOCATION, "repositoryName": "__repository__", "sensorName": name}

    def set_sensor(self, name: str, running: bool) -> None:
        """Start or stop a sensor through the API (tests that need it in a known state)."""
        selector = self.sensor_selector(name)
        state = self.graphql(SENSOR_STATE, {"selector": selector})["sensorOrError"]["sensorState"]
        if (state["status"] == "RUNNING") == running:
            return
        if running:
            self.graphql(START_SENSOR, {"selector": selector})
        else:
            self.graphql(STOP_SENSOR, {"origin": state["id"], "selector": state["selectorId"]})

    def committed_channels(self) -> tuple[int, ...]:
        """The channel ids of the stream's committed layout (read from its folder)."""
        from elasticity.migration import LayoutRegistry
        from elasticity.state import Location

        return LayoutRegistry(Location.of(elastic_path(self.stream_root))).committed().channels

    def stop_elasticity(self) -> None:
        """Only the test rescales: the stream's own control loop is switched off, and a resize
        run it requested before is let finish."""
        self.set_sensor(elasticity_sensor_name(STREAM), running=False)
        job = resize_job_name(STREAM)
        wait_for(
            "no resize run in flight",
            lambda: not self.graphql(ACTIVE_RUNS, {"job": job})["runsOrError"]["results"],
            480,
            poll_s=3,
        )


def stream_run_config(topic: str) -> dict:
    config = {
        "channels": CHANNELS,
        # A batch every 5 s: each batch costs the driver a fixed planning and scheduling overhead,
        # and at a 2-s trigger the stream's JVM alone took 0.74 of the 2 cores (profiled); the runs
        # the tests launch (each a fresh process importing the code location) need them. A rescale
        # still waits at most one trigger for its batch boundary.
        "trigger_seconds": 5.0,
        "max_offsets_per_trigger": 2000,
        "observe_every_s": 3.0,
        "input_topic": topic,
    }
    return {"ops": {op_name(stream_asset_key(STREAM)): {"config": config}}}


@contextmanager
def running_stack(folder: Path, bootstrap: str) -> Iterator[Stack]:
    """`esp ui` against the broker, the stream's run launched through it and fed; all stopped after."""
    from pipelines.kafka_topics import TopicSpec, ensure_topics

    ensure_topics(bootstrap, [TopicSpec(name=TOPIC, partitions=4)])
    host, port = bootstrap.split(":")
    settings = {
        "kafka": {"host": host, "client_port": int(port)},
        # Task slots for a few channels side by side, and for the check and backfill runs' Spark.
        "spark": {"master": "local[4]", "ui_enabled": False, "shuffle_partitions": 4},
    }
    load = SteadyLoad(bootstrap, TOPIC)
    load.start()
    try:
        with running_ui_process(folder, settings, UI_ENV, start_timeout_s=600) as (ui_port, _):
            stack = Stack(port=ui_port, folder=folder, bootstrap=bootstrap)
            stack.stream_run_id = stack.launch(stream_job_name(STREAM), stream_run_config(TOPIC))
            try:
                checkpoint = checkpoint_path(stack.stream_root)
                wait_for("the stream's first committed batch", lambda: committed_batches(checkpoint) > 0, 600)
                yield stack
            finally:
                stack.graphql(TERMINATE, {"id": stack.stream_run_id})
                stack.wait_for_status(stack.stream_run_id, {"CANCELED", "FAILURE", "SUCCESS"}, 120)
    finally:
        load.stop()
