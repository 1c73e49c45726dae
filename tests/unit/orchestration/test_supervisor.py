"""The supervisor sensor starts a stream that is not running and backs off after failures."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from dataclasses import asdict

import psutil
import pytest
from dagster import (
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    RunRequest,
    SkipReason,
    build_sensor_context,
)
from dagster._core.storage.dagster_run import DagsterRun

from elasticity.state import Location
from orchestration.names import RESTART_REASON_TAG, stream_job_name
from orchestration.resources import EspSettingsResource
from orchestration.streams import supervisor
from orchestration.streams.catalog import STREAMS, stream_spec
from orchestration.streams.supervisor import BASE_BACKOFF_S, MAX_BACKOFF_S, backoff_s, make_supervisor
from pipelines.streams.heartbeat import HEARTBEAT, Heartbeat, HeartbeatWriter

JOB = stream_job_name(STREAMS[0].name)


@pytest.fixture
def instance():
    with DagsterInstance.ephemeral() as ephemeral:
        yield ephemeral


def _add_run(instance: DagsterInstance, status: DagsterRunStatus) -> str:
    run = DagsterRun(job_name=JOB, status=status)
    instance.add_run(run)
    return run.run_id


def _tick(instance: DagsterInstance, settings: EspSettingsResource, cursor: str | None = None):
    sensor = make_supervisor(STREAMS[0], JOB)
    context = build_sensor_context(instance=instance, cursor=cursor, resources={"esp_settings": settings})
    return sensor(context), context.cursor


def test_backoff_doubles_and_is_capped():
    assert backoff_s(0) == 0
    assert backoff_s(1) == BASE_BACKOFF_S
    assert backoff_s(2) == 2 * BASE_BACKOFF_S
    assert backoff_s(50) == MAX_BACKOFF_S


def test_starts_the_stream_when_no_run_exists(instance, settings):
    result, _ = _tick(instance, settings)
    assert isinstance(result, RunRequest)
    assert result.tags[RESTART_REASON_TAG] == "first start"


def test_skips_while_a_run_is_active(instance, settings):
    run_id = _add_run(instance, DagsterRunStatus.STARTED)
    result, _ = _tick(instance, settings)
    assert isinstance(result, SkipReason)
    assert run_id[:8] in result.skip_message and "running" in result.skip_message


def test_backs_off_after_a_failure_then_restarts(instance, settings):
    _add_run(instance, DagsterRunStatus.FAILURE)
    result, cursor = _tick(instance, settings)
    assert isinstance(result, SkipReason) and "failed (1 in a row)" in result.skip_message
    state = json.loads(cursor)
    state["ended_at"] -= BASE_BACKOFF_S + 1  # the backoff has passed
    result, _ = _tick(instance, settings, json.dumps(state))
    assert isinstance(result, RunRequest)
    assert "ended FAILURE" in result.tags[RESTART_REASON_TAG]


def test_consecutive_failures_lengthen_the_wait(instance, settings):
    _add_run(instance, DagsterRunStatus.FAILURE)
    _, cursor = _tick(instance, settings)
    _add_run(instance, DagsterRunStatus.FAILURE)
    result, cursor = _tick(instance, settings, cursor)
    assert "2 in a row" in result.skip_message
    assert json.loads(cursor)["failures"] == 2


def _started_run(instance: DagsterInstance) -> str:
    """A run the way a run worker leaves it: STARTED, with a start time from its RUN_START event."""
    run_id = _add_run(instance, DagsterRunStatus.NOT_STARTED)
    instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_START.value, job_name=JOB), run_id)
    assert instance.get_run_by_id(run_id).status == DagsterRunStatus.STARTED
    return run_id


def _control_dir(settings: EspSettingsResource) -> str:
    return stream_spec(settings.load(), STREAMS[0]).control_dir


def test_a_started_run_whose_driver_is_gone_is_marked_failed_then_restarted(instance, settings, monkeypatch):
    run_id = _started_run(instance)
    monkeypatch.setattr(supervisor, "START_GRACE_S", 0.0)
    # The driver beat once, then was SIGKILLed: its pid no longer exists.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(child.pid).create_time()
    child.wait()
    beat = Heartbeat(socket.gethostname(), child.pid, started, time.time())
    # Published as the stream does (checksummed): a raw file would read as no beat at all.
    Location.of(_control_dir(settings)).publish_bytes(HEARTBEAT, json.dumps(asdict(beat)).encode())

    result, cursor = _tick(instance, settings)
    assert isinstance(result, SkipReason) and "marked failed" in result.skip_message
    assert f"driver process {child.pid}" in result.skip_message  # judged by its beat, not its absence
    assert instance.get_run_by_id(run_id).status == DagsterRunStatus.FAILURE
    result, _ = _tick(instance, settings, cursor)
    assert isinstance(result, SkipReason) and "failed (1 in a row)" in result.skip_message  # then backs off


def test_a_started_run_that_beats_is_left_alone(instance, settings, monkeypatch):
    run_id = _started_run(instance)
    monkeypatch.setattr(supervisor, "START_GRACE_S", 0.0)
    writer = HeartbeatWriter(_control_dir(settings), period_s=60).start()
    try:
        result, _ = _tick(instance, settings)
    finally:
        writer.stop()
    assert isinstance(result, SkipReason) and "is running" in result.skip_message
    assert instance.get_run_by_id(run_id).status == DagsterRunStatus.STARTED


def test_a_young_run_is_given_time_to_start_beating(instance, settings):
    run_id = _started_run(instance)
    result, _ = _tick(instance, settings)  # no heartbeat yet, but within START_GRACE_S
    assert isinstance(result, SkipReason) and "is running" in result.skip_message
    assert instance.get_run_by_id(run_id).status == DagsterRunStatus.STARTED
