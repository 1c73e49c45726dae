"""The control room on a real webserver + daemon (`dagster dev`), through its GraphQL API, as the UI
drives it: the policy job changes the SLO the elasticity sensor's next decision cites; a failed
resize run is alerted by the run-failure sensor; a stream asset whose observations stop goes
stale under Dagster's freshness check; the stop job ends the stream's run and holds it stopped.

No Kafka and no Spark: the sensor reads a scripted steady stream (tests.fakes), and the stream's
run is a stand-in job of the same name that idles until terminated. One `dagster dev` serves all
the scenarios.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from orchestration.names import (
    ALERTS_ASSET_KEY,
    FRESHNESS_CHECK,
    elasticity_sensor_name,
    layout_asset_key,
    op_name,
    policy_asset_key,
    policy_job_name,
    resize_job_name,
    stop_job_name,
    stream_asset_key,
    stream_job_name,
)
from tests.conftest import REPO_ROOT, free_port
from tests.e2e.dagster_ui import graphql, run_errors, wait_for_status
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

STALE_AFTER_S = 20
RUN_TIMEOUT_S = 600  # a run takes minutes to start on a loaded 2-core machine
DEFS_TEMPLATE = """
import sys, time
sys.path.insert(0, {repo!r})

from dagster import DefaultSensorStatus, Definitions, job, op

from orchestration.elasticity.definitions import elasticity_definitions
from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.health.definitions import health_definitions
from orchestration.names import stream_job_name
from orchestration.resources import EspSettingsResource, KafkaResource
from orchestration.streams.catalog import StreamEntry
from orchestration.streams.stop import make_stop_job
from tests.fakes.elasticity_stream import FakeStream

ENTRY = StreamEntry(name={name!r}, job="wordcount", input_topic="words", load_kind="words")
POLICY = ElasticityPolicy(slo_s=15.0, sample_period_s=5.0)


class Steady:
    \"\"\"A stream within its SLO, advanced to the sensor's clock at each read.\"\"\"

    def __init__(self):
        self.stream = FakeStream(channels=(0, 1, 2, 3), now_s=time.time() - 60)

    def read(self, now_s):
        if now_s > self.stream.now_s:
            self.stream.run(now_s - self.stream.now_s, 400, 0.8, lag_records=200)
        return self.stream.read(now_s)


STEADY = Steady()


@op
def idle_stream():
    while True:
        time.sleep(0.5)


@job(name=stream_job_name(ENTRY.name))
def stand_in_stream():
    idle_stream()


settings = EspSettingsResource(config_file={config!r})
defs = Definitions.merge(
    elasticity_definitions(
        [ENTRY], interval_s=5, policy=POLICY, default_status=DefaultSensorStatus.RUNNING,
        source=lambda spec, policy: STEADY,
    ),
    health_definitions([ENTRY], policy=POLICY, stale_after_s={stale}, freshness_interval_s=5, with_schedule=False),
    Definitions(jobs=[stand_in_stream, make_stop_job(ENTRY)]),
    Definitions(resources={{"esp_settings": settings, "kafka": KafkaResource(settings=settings)}}),
)
"""

LOCATIONS = "{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"
LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""
TICKS = """{ repositoriesOrError { ... on RepositoryConnection { nodes { sensors {
  name sensorState { ticks(limit: 50) { timestamp status skipReason } } } } } } }"""
MATERIALIZATIONS = """query($key: AssetKeyInput!) { assetOrError(assetKey: $key) { ... on Asset {
  assetMaterializations(limit: 10) { runId metadataEntries { label
    ... on TextMetadataEntry { text } ... on FloatMetadataEntry { floatValue } } } } } }"""
CHECK_EXECUTIONS = """query($key: AssetKeyInput!, $name: String!) {
  assetCheckExecutions(assetKey: $key, checkName: $name, limit: 10) {
    runId status evaluation { success metadataEntries { label } } } }"""


class ControlRoom:
    """`dagster dev` on the template's definitions; launches jobs and reads state like the UI."""

    def __init__(self, tmp_path: Path) -> None:
        from orchestration.stack.dagster_home import dagster_env, prepare_dagster_home
        from orchestration.stack.project import load_settings

        self.name = f"room_{uuid.uuid4().hex[:6]}"
        config = tmp_path / "esp.json"
        config.write_text(json.dumps({"project_root": str(REPO_ROOT), "run_dir_name": str(tmp_path / "run")}))
        self.settings = load_settings(config)
        home = prepare_dagster_home(self.settings)
        # Run monitoring fails a run still STARTING after 180 s; on a loaded machine that is normal.
        instance_yaml = home / "dagster.yaml"
        instance_yaml.write_text(
            instance_yaml.read_text().replace("start_timeout_seconds: 180", "start_timeout_seconds: 900")
        )
        defs = tmp_path / "room_defs.py"
        defs.write_text(
            DEFS_TEMPLATE.format(repo=str(REPO_ROOT), name=self.name, config=str(config), stale=STALE_AFTER_S)
        )
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "dagster"),
                "dev",
                "-f",
                str(defs),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
            ],
            cwd=REPO_ROOT,
            stdout=open(tmp_path / "dagster.log", "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # A loaded machine answers the daemon's calls to the code server slowly: a failed
            # dequeue would fail the run the test waits for.
            env={
                **dagster_env(self.settings, os.environ),
                "ESP_CONFIG": str(config),
                "DAGSTER_GRPC_TIMEOUT_SECONDS": "300",
            },
        )
        self.location = self._wait_for_location()
        self.runs: dict[str, str] = {}
        self.observed_at = 0.0

    def _wait_for_location(self, timeout_s: float = 240) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "dagster dev exited early"
            try:
                nodes = graphql(self.port, LOCATIONS)["repositoriesOrError"].get("nodes") or []
                if nodes:
                    return nodes[0]["location"]["name"]
            except OSError:
                pass
            time.sleep(2)
        raise AssertionError("the code location did not load in time")

    def launch(self, job: str, run_config: dict) -> str:
        selector = {"repositoryLocationName": self.location, "repositoryName": "__repository__", "jobName": job}
        result = graphql(self.port, LAUNCH, {"params": {"selector": selector, "runConfigData": run_config}})
        assert result["launchRun"]["__typename"] == "LaunchRunSuccess", result
        return result["launchRun"]["run"]["runId"]

    def launch_checks(self, checks: list) -> str:
        """Execute asset checks alone, as their Execute button does (the implicit asset job)."""
        selector = {
            "repositoryLocationName": self.location,
            "repositoryName": "__repository__",
            "jobName": "__ASSET_JOB",
            "assetSelection": [],
            "assetCheckSelection": [{"assetKey": {"path": list(key.path)}, "name": name} for key, name in checks],
        }
        result = graphql(self.port, LAUNCH, {"params": {"selector": selector, "runConfigData": {}}})
        assert result["launchRun"]["__typename"] == "LaunchRunSuccess", result
        return result["launchRun"]["run"]["runId"]

    def ticks(self, sensor: str) -> list[dict]:
        for node in graphql(self.port, TICKS)["repositoriesOrError"]["nodes"]:
            for found in node["sensors"]:
                if found["name"] == sensor:
                    return found["sensorState"]["ticks"]
        return []

    def materializations(self, key) -> list[dict]:
        asset = graphql(self.port, MATERIALIZATIONS, {"key": {"path": list(key.path)}})["assetOrError"]
        return asset.get("assetMaterializations") or []

    def check_executions(self, key, name: str) -> list[dict]:
        variables = {"key": {"path": list(key.path)}, "name": name}
        return graphql(self.port, CHECK_EXECUTIONS, variables)["assetCheckExecutions"]

    def close(self) -> None:
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)


def wait_until(condition, what: str, timeout_s: float = RUN_TIMEOUT_S, every_s: float = 2):
    return wait_for(what, condition, timeout_s, every_s)


def _observe_once(room: ControlRoom) -> float:
    """One observation of the stream asset, as the stream's run makes them; returns its time."""
    from dagster import AssetObservation, DagsterInstance, MetadataValue

    from orchestration.stack.dagster_home import dagster_home

    observed_at = time.time()
    with DagsterInstance.from_config(str(dagster_home(room.settings))) as instance:
        metadata = {"channels": 2, "dagster/last_updated_timestamp": MetadataValue.timestamp(observed_at)}
        instance.report_runless_asset_event(AssetObservation(asset_key=stream_asset_key(room.name), metadata=metadata))
    return observed_at


@pytest.fixture(scope="module")
def room(tmp_path_factory):
    """The control room with every scenario's runs launched at once (a run takes long to start
    here; the tests then check each outcome)."""
    room = ControlRoom(tmp_path_factory.mktemp("room"))
    policy_op = op_name(policy_asset_key(room.name))
    layout_op = op_name(layout_asset_key(room.name))
    try:
        room.runs["bad_policy"] = room.launch(
            policy_job_name(room.name), {"ops": {policy_op: {"config": {"min_channels": 99}}}}
        )
        # The stream never ran: it has no committed layout, so the rescale run fails.
        room.runs["resize"] = room.launch(
            resize_job_name(room.name), {"ops": {layout_op: {"config": {"target": {"op": "scale_to", "channels": 2}}}}}
        )
        room.runs["stream"] = room.launch(stream_job_name(room.name), {})
        room.observed_at = _observe_once(room)
        # As the check's Execute button in the UI does: the fresh observation passes.
        room.runs["freshness"] = room.launch_checks([(stream_asset_key(room.name), FRESHNESS_CHECK)])
        yield room
    finally:
        room.close()


def _entries(materialization: dict) -> dict:
    return {e["label"]: e.get("text", e.get("floatValue")) for e in materialization["metadataEntries"]}


def test_the_policy_job_changes_the_slo_the_next_decision_cites(room):
    sensor = elasticity_sensor_name(room.name)
    wait_until(lambda: any("SLO 15,000 ms" in (t["skipReason"] or "") for t in room.ticks(sensor)), "a first reason")
    run_id = room.launch(
        policy_job_name(room.name),
        {"ops": {op_name(policy_asset_key(room.name)): {"config": {"slo_s": 42.0, "note": "looser"}}}},
    )
    assert wait_for_status(room.port, run_id, {"SUCCESS", "FAILURE"}, RUN_TIMEOUT_S) == "SUCCESS"
    changed_at = time.time()
    [recorded] = [m for m in room.materializations(policy_asset_key(room.name)) if m["runId"] == run_id]
    assert _entries(recorded)["slo_ms"] == 42_000
    reason = wait_until(
        lambda: next(
            (t["skipReason"] for t in room.ticks(sensor) if t["timestamp"] > changed_at and t["skipReason"]), None
        ),
        "a tick after the change",
    )
    assert "SLO 42,000 ms" in reason, reason


def test_a_bad_policy_value_fails_the_run(room):
    assert wait_for_status(room.port, room.runs["bad_policy"], {"SUCCESS", "FAILURE"}, RUN_TIMEOUT_S) == "FAILURE"


def test_a_failed_resize_run_raises_an_alert(room):
    from orchestration.health.alerts import read_alerts

    run_id = room.runs["resize"]
    assert wait_for_status(room.port, run_id, {"SUCCESS", "FAILURE"}, RUN_TIMEOUT_S) == "FAILURE"
    # What a test that expected success would print: the run's own error events name the cause.
    errors = run_errors(room.port, run_id)
    assert any("no committed layout" in line for line in errors), errors
    alert = wait_until(
        lambda: next((a for a in read_alerts(room.settings.run_dir) if a.run_id == run_id), None), "the alert"
    )
    assert (alert.stream, alert.kind) == (room.name, "resize")
    assert "no committed layout" in alert.message
    recorded = wait_until(
        lambda: [m for m in room.materializations(ALERTS_ASSET_KEY) if _entries(m).get("run_id") == run_id],
        "the alert's materialization",
    )
    assert _entries(recorded[0])["kind"] == "resize"


def test_a_stream_without_observations_goes_stale(room):
    key = stream_asset_key(room.name)

    def labels(execution: dict) -> set[str]:
        return {e["label"] for e in execution["evaluation"]["metadataEntries"]}

    def stale() -> dict | None:
        # Overdue since the observation (not "never observed", as before it).
        executions = [e for e in room.check_executions(key, FRESHNESS_CHECK) if e["evaluation"]]
        failed = [e for e in executions if not e["evaluation"]["success"]]
        return next((e for e in failed if "dagster/last_updated_timestamp" in labels(e)), None)

    # The check launched right after the observation, or Dagster's freshness sensor once the
    # observation may be overdue, finds it stale: no observation came since.
    wait_until(stale, "a failed freshness check", timeout_s=STALE_AFTER_S + RUN_TIMEOUT_S)
    assert time.time() - room.observed_at >= STALE_AFTER_S


def test_the_stop_job_ends_the_streams_run_and_holds_it_stopped(room):
    from orchestration.streams.catalog import StreamEntry, stream_spec
    from orchestration.streams.stop import read_stop_marker

    stream_run = room.runs["stream"]
    assert wait_for_status(room.port, stream_run, {"STARTED", "FAILURE"}, RUN_TIMEOUT_S) == "STARTED"
    stop_run = room.launch(stop_job_name(room.name), {})
    assert wait_for_status(room.port, stop_run, {"SUCCESS", "FAILURE"}, RUN_TIMEOUT_S) == "SUCCESS"
    assert wait_for_status(room.port, stream_run, {"CANCELED", "FAILURE", "SUCCESS"}, RUN_TIMEOUT_S) == "CANCELED"
    entry = StreamEntry(name=room.name, job="wordcount", input_topic="words", load_kind="words")
    marker = read_stop_marker(stream_spec(room.settings, entry).control_dir)
    assert marker is not None and marker.run_id == stop_run
