"""The soak's own Dagster: `dagster dev` (webserver, daemon, code server) over a code location
holding the soaked stream's elasticity domain — its resizing asset and job, and its elasticity
sensor, running. The soak launches resize runs through the webserver's GraphQL API (the way a
click on Materialize does: run queue → daemon → code server → run worker), lets the sensor
launch its own, and SIGKILLs the daemon or the code server while a resize run is in flight.

What `dagster dev` does when one of its parts dies is Dagster's business; the soak only needs a
working control room afterwards, so `ensure_serving()` restarts the whole `dagster dev` when its
webserver stopped answering or a part is gone, and says so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from orchestration.names import RESCALE_RULE_TAG, layout_asset_key, op_name, resize_job_name
from orchestration.stack.ports import free_port
from pipelines.streams.names import FIRST_STAGE

SOAK_TAG = "esp/soak"
ENDED = frozenset({"SUCCESS", "FAILURE", "CANCELED"})

DEFS_TEMPLATE = """
from dagster import DefaultSensorStatus, Definitions

from orchestration.elasticity.definitions import elasticity_definitions
from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.resources import EspSettingsResource
from orchestration.streams.catalog import StreamEntry

ENTRY = StreamEntry(name={name!r}, job={job!r}, input_topic={topic!r}, settings={settings!r})
POLICY = ElasticityPolicy(
    slo_s=10.0, sample_period_s=5.0, probe_timeout_s=30.0, max_channels=6, rescale_timeout_s=240.0
)
defs = Definitions.merge(
    elasticity_definitions([ENTRY], interval_s=10, policy=POLICY, default_status=DefaultSensorStatus.RUNNING),
    Definitions(resources={{"esp_settings": EspSettingsResource(config_file={config!r})}}),
)
"""

# An endurance run's control room also deletes its finished runs, as production's nightly
# run-retention schedule does, only every 5 minutes and with the run's retention as the age.
RETENTION_TEMPLATE = """
from dagster import DefaultScheduleStatus, ScheduleDefinition

from orchestration.platform.run_retention import delete_old_runs_op, run_retention_job

defs = Definitions.merge(
    defs,
    Definitions(
        jobs=[run_retention_job],
        schedules=[
            ScheduleDefinition(
                name="soak_run_retention",
                job=run_retention_job,
                cron_schedule="*/5 * * * *",
                default_status=DefaultScheduleStatus.RUNNING,
                run_config={{"ops": {{delete_old_runs_op.name: {{"config": {{"max_age_days": {days!r}}}}}}}}},
            )
        ],
    ),
)
"""

LAUNCH = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""

REPOSITORIES = (
    """{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } jobs { name } } } } }"""
)

RUNS = """query($job: String!) {
  runsOrError(filter: {pipelineName: $job}) {
    ... on Runs { results { runId status tags { key value } } }
  }
}"""


@dataclass(frozen=True)
class ResizeRun:
    run_id: str
    status: str
    by_sensor: bool
    by_soak: bool


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


class ControlRoom:
    """`dagster dev` for one soaked stream, in its own process group, on 127.0.0.1."""

    def __init__(
        self,
        folder: Path,
        config: Path,
        stream: str,
        topic: str,
        run_retention_s: float | None = None,
        job: str = "wordcount",
        stream_settings: dict[str, Any] | None = None,
    ) -> None:
        """`job` and `stream_settings` are the stream's catalog entry's (a multi-stage user job gets
        its stages sensor and a resize job per stage)."""
        self.folder, self.config, self.stream, self.topic = folder, config, stream, topic
        self.job, self.stream_settings = job, stream_settings or {}
        self.run_retention_s = run_retention_s
        self.log = folder / "dagster.log"
        self.defs = folder / "soak_defs.py"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._selector: dict[str, str] | None = None

    # -- life ----------------------------------------------------------------------------------

    def start(self, timeout_s: float = 240) -> None:
        from orchestration.stack.dagster_home import dagster_env, prepare_dagster_home
        from orchestration.stack.project import load_settings

        settings = load_settings(self.config)
        prepare_dagster_home(settings)
        defs = DEFS_TEMPLATE.format(
            name=self.stream, topic=self.topic, config=str(self.config), job=self.job, settings=self.stream_settings
        )
        if self.run_retention_s is not None:
            defs += RETENTION_TEMPLATE.format(days=self.run_retention_s / 86_400)
        self.defs.write_text(defs)
        dagster = str(Path(sys.executable).parent / "dagster")
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [dagster, "dev", "-f", str(self.defs), "-h", "127.0.0.1", "-p", str(self.port)],
                cwd=settings.project_root,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**dagster_env(settings, os.environ), "ESP_CONFIG": str(self.config)},
            )
        self._wait_until_serving(timeout_s)

    def stop(self, drain_s: float = 30) -> None:
        """SIGINT the whole process group, let it drain, then SIGKILL what is left.

        The group holds more than `dagster dev`'s children: when the daemon dies, `dagster dev`
        exits but leaves the code server and the run workers it launched running. Interrupted, a
        run worker records its run's end within seconds; SIGKILLed first, the run stays STARTED
        until run monitoring's `dagster/max_runtime` (8 minutes for a resize run)."""
        if self.process is None:
            return
        group = self.process.pid
        try:
            os.killpg(group, signal.SIGINT)  # dagster dev shuts its parts down on SIGINT
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + drain_s
        try:
            self.process.wait(timeout=drain_s)
        except subprocess.TimeoutExpired:
            pass
        while _group_members(group) and time.monotonic() < deadline:
            time.sleep(0.2)
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)
        self.process = None

    def ensure_serving(self) -> bool:
        """Restart the whole `dagster dev` if it died or lost its daemon or code server; True if restarted."""
        if self.process is not None and self.process.poll() is None and self.daemons() and self.code_servers():
            try:
                self._repository_selector(refresh=True)
                return False
            except OSError:
                pass
        self.stop()
        self.restarts += 1
        self.start()
        return True

    def _wait_until_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"dagster dev exited while starting; see {self.log}")
            try:
                self._repository_selector(refresh=True)
                if self.daemons():
                    return
            except (OSError, LookupError):
                pass
            time.sleep(1)
        raise RuntimeError(f"dagster dev did not serve the soak's code location in {timeout_s:.0f} s; see {self.log}")

    # -- its parts -----------------------------------------------------------------------------

    def _parts(self) -> list[psutil.Process]:
        if self.process is None or self.process.poll() is not None:
            return []
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def _parts_running(self, *commands: str) -> list[psutil.Process]:
        return [p for p in self._parts() if any(f" -m {command} " in _cmdline(p) for command in commands)]

    def daemons(self) -> list[psutil.Process]:
        return self._parts_running("dagster._daemon run", "dagster-daemon run")

    def code_servers(self) -> list[psutil.Process]:
        """The gRPC servers that load the user code and launch run workers. (Killed, one is not
        respawned by its `dagster code-server start` proxy in Dagster 1.13: launches then fail
        with PipelineNotFoundError until `dagster dev` restarts.)"""
        return self._parts_running("dagster api grpc")

    def kill_daemon(self) -> int | None:
        return _kill_first(self.daemons())

    def kill_code_server(self) -> int | None:
        return _kill_first(self.code_servers())

    # -- runs ----------------------------------------------------------------------------------

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.loads(response.read())
        if body.get("errors"):
            raise RuntimeError(f"GraphQL errors: {body['errors']}")
        data: dict[str, Any] = body["data"]
        return data

    def _repository_selector(self, refresh: bool = False) -> dict[str, str]:
        if self._selector is None or refresh:
            job = resize_job_name(self.stream)
            for node in self.graphql(REPOSITORIES)["repositoriesOrError"].get("nodes", []):
                if any(j["name"] == job for j in node["jobs"]):
                    self._selector = {
                        "repositoryLocationName": node["location"]["name"],
                        "repositoryName": node["name"],
                    }
                    break
            else:
                raise LookupError(f"no loaded code location has the job {job}")
        return self._selector

    def launch_resize(self, target: dict[str, Any], reason: str) -> str:
        """Launch the stream's resize job through the webserver, as a user would; the run id."""
        params = {
            "selector": {**self._repository_selector(), "jobName": resize_job_name(self.stream)},
            "runConfigData": {
                "ops": {op_name(layout_asset_key(self.stream)): {"config": {"target": target, "reason": reason}}}
            },
            "executionMetadata": {"tags": [{"key": SOAK_TAG, "value": "manual"}]},
        }
        launched = self.graphql(LAUNCH, {"params": params})["launchRun"]
        if launched["__typename"] != "LaunchRunSuccess":
            raise RuntimeError(f"the resize run was not launched: {launched}")
        run_id: str = launched["run"]["runId"]
        return run_id

    def resize_runs(self, stage: str = FIRST_STAGE) -> list[ResizeRun]:
        """The runs of one stage's resize job, newest first."""
        runs = self.graphql(RUNS, {"job": resize_job_name(self.stream, stage)})["runsOrError"].get("results", [])
        found = []
        for run in runs:
            tags = {t["key"]: t["value"] for t in run["tags"]}
            found.append(ResizeRun(run["runId"], run["status"], RESCALE_RULE_TAG in tags, SOAK_TAG in tags))
        return found

    def status(self, run_id: str, stage: str = FIRST_STAGE) -> str:
        return next((r.status for r in self.resize_runs(stage) if r.run_id == run_id), "UNKNOWN")

    def wait_for_status(self, run_id: str, wanted: frozenset[str], timeout_s: float, stage: str = FIRST_STAGE) -> str:
        deadline = time.monotonic() + timeout_s
        status = self.status(run_id, stage)
        while status not in wanted and time.monotonic() < deadline:
            time.sleep(0.5)
            status = self.status(run_id, stage)
        return status


def _group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
        except (OSError, psutil.Error):
            continue
    return members


def _kill_first(processes: list[psutil.Process]) -> int | None:
    for process in processes:
        try:
            process.send_signal(signal.SIGKILL)
            return int(process.pid)
        except psutil.NoSuchProcess:
            continue
    return None
