"""Drive the real Dagster webserver + daemon (`esp ui`) from tests through its GraphQL API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestration.names import CODE_LOCATION
from tests.conftest import free_port


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.loads(response.read())
    if body.get("errors"):
        raise AssertionError(f"GraphQL errors: {body['errors']}")
    return body["data"]


def _wait_for_server(port: int, process: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"esp ui exited early:\n{log.read_text()[-3000:]}"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise AssertionError("the Dagster webserver did not answer in time")


@contextmanager
def running_ui(tmp_path: Path, settings: dict) -> Iterator[int]:
    """`esp ui` on a free port with the given esp settings; yields the port."""
    with running_ui_process(tmp_path, settings) as (port, _):
        yield port


@contextmanager
def running_ui_process(
    tmp_path: Path, settings: dict, env: dict[str, str] | None = None, start_timeout_s: float = 180
) -> Iterator[tuple[int, int]]:
    """`esp ui` on a free port with the given esp settings (written to tmp_path/esp-ui.json) and
    extra environment; yields the port and the pid of the `esp ui` process (the root of its process tree)."""
    port = free_port()
    config = tmp_path / "esp-ui.json"
    config.write_text(json.dumps({"run_dir_name": str(tmp_path / "run"), **settings}))
    esp = str(Path(sys.executable).parent / "esp")
    log = tmp_path / "ui.log"
    process = subprocess.Popen(
        [esp, "ui", "--port", str(port), "--config", str(config)],
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **(env or {}), "ESP_CONFIG": str(config)},
    )
    try:
        _wait_for_server(port, process, log, start_timeout_s)
        yield port, process.pid
    finally:
        # dagster dev shuts down on SIGINT; whatever is left of the group after that is killed.
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


LAUNCH = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""

RUN_STATUS = """query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }"""

TERMINATE = """mutation($id: String!) { terminateRun(runId: $id) { __typename } }"""


def launch(port: int, job: str, run_config: dict) -> str:
    params = {
        "selector": {"repositoryLocationName": CODE_LOCATION, "repositoryName": "__repository__", "jobName": job},
        "runConfigData": run_config,
    }
    result = graphql(port, LAUNCH, {"params": params})["launchRun"]
    assert result["__typename"] == "LaunchRunSuccess", result
    return result["run"]["runId"]


def run_status(port: int, run_id: str) -> str:
    return graphql(port, RUN_STATUS, {"id": run_id})["runOrError"]["status"]


def wait_for_status(port: int, run_id: str, wanted: set[str], timeout_s: float = 180) -> str:
    deadline = time.monotonic() + timeout_s
    status = run_status(port, run_id)
    while status not in wanted:
        assert time.monotonic() < deadline, f"run {run_id} stayed {status}"
        time.sleep(1)
        status = run_status(port, run_id)
    return status


RUN_ERRORS = """query($id: ID!) { logsForRun(runId: $id) { __typename ... on EventConnection { events {
  __typename ... on MessageEvent { message level } ... on ErrorEvent { error { message } } } } } }"""


def run_errors(port: int, run_id: str) -> list[str]:
    """The run's error-level events, each as "EventType: message: error" (what the run page shows in red)."""
    logs = graphql(port, RUN_ERRORS, {"id": run_id})["logsForRun"]
    lines = []
    for event in logs.get("events", []):
        error = (event.get("error") or {}).get("message", "")
        if event.get("level") == "ERROR" or error:
            lines.append(f"{event['__typename']}: {event.get('message', '')}: {error}".strip(": "))
    return lines


def wait_for_success(port: int, run_id: str, timeout_s: float = 180, name: str = "run") -> None:
    """Wait for the run to end; if it did not succeed, fail naming why, from the run's own error events
    (a bare "ended FAILURE" left a CI failure without a cause)."""
    status = wait_for_status(port, run_id, {"SUCCESS", "FAILURE", "CANCELED"}, timeout_s)
    if status != "SUCCESS":
        errors = "\n".join(run_errors(port, run_id)) or "(no error events)"
        raise AssertionError(f"{name}: run {run_id} ended {status}:\n{errors}")
