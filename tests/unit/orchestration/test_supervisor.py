"""The supervisor sensor starts a stream that is not running and backs off after failures."""

from __future__ import annotations

import json

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunRequest, SkipReason, build_sensor_context
from dagster._core.storage.dagster_run import DagsterRun

from orchestration.names import RESTART_REASON_TAG, stream_job_name
from orchestration.streams.catalog import STREAMS
from orchestration.streams.supervisor import BASE_BACKOFF_S, MAX_BACKOFF_S, backoff_s, make_supervisor

JOB = stream_job_name(STREAMS[0].name)


@pytest.fixture
def instance():
    with DagsterInstance.ephemeral() as ephemeral:
        yield ephemeral


def _add_run(instance: DagsterInstance, status: DagsterRunStatus) -> str:
    run = DagsterRun(job_name=JOB, status=status)
    instance.add_run(run)
    return run.run_id


def _tick(instance: DagsterInstance, cursor: str | None = None):
    sensor = make_supervisor(STREAMS[0], JOB)
    context = build_sensor_context(instance=instance, cursor=cursor)
    return sensor(context), context.cursor


def test_backoff_doubles_and_is_capped():
    assert backoff_s(0) == 0
    assert backoff_s(1) == BASE_BACKOFF_S
    assert backoff_s(2) == 2 * BASE_BACKOFF_S
    assert backoff_s(50) == MAX_BACKOFF_S


def test_starts_the_stream_when_no_run_exists(instance):
    result, _ = _tick(instance)
    assert isinstance(result, RunRequest)
    assert result.tags[RESTART_REASON_TAG] == "first start"


def test_skips_while_a_run_is_active(instance):
    run_id = _add_run(instance, DagsterRunStatus.STARTED)
    result, _ = _tick(instance)
    assert isinstance(result, SkipReason)
    assert run_id[:8] in result.skip_message and "running" in result.skip_message


def test_backs_off_after_a_failure_then_restarts(instance):
    _add_run(instance, DagsterRunStatus.FAILURE)
    result, cursor = _tick(instance)
    assert isinstance(result, SkipReason) and "failed (1 in a row)" in result.skip_message
    state = json.loads(cursor)
    state["ended_at"] -= BASE_BACKOFF_S + 1  # the backoff has passed
    result, _ = _tick(instance, json.dumps(state))
    assert isinstance(result, RunRequest)
    assert "ended FAILURE" in result.tags[RESTART_REASON_TAG]


def test_consecutive_failures_lengthen_the_wait(instance):
    _add_run(instance, DagsterRunStatus.FAILURE)
    _, cursor = _tick(instance)
    _add_run(instance, DagsterRunStatus.FAILURE)
    result, cursor = _tick(instance, cursor)
    assert "2 in a row" in result.skip_message
    assert json.loads(cursor)["failures"] == 2
