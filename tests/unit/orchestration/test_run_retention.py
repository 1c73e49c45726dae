"""Old finished runs are deleted with their event logs; runs not ended and each stream's newest run are kept."""

from __future__ import annotations

import datetime as dt

from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.test_utils import create_run_for_test

from orchestration.names import STREAM_TAG
from orchestration.platform.run_retention import RunRetentionConfig, delete_old_runs
from orchestration.streams.catalog import STREAMS


def test_finished_runs_older_than_the_age_are_deleted_and_the_rest_kept():
    instance = DagsterInstance.ephemeral()
    stream = STREAMS[0].name
    old_success = create_run_for_test(instance, status=DagsterRunStatus.SUCCESS)
    old_failure = create_run_for_test(instance, status=DagsterRunStatus.FAILURE)
    old_stream_run = create_run_for_test(instance, status=DagsterRunStatus.FAILURE, tags={STREAM_TAG: stream})
    started = create_run_for_test(instance, status=DagsterRunStatus.STARTED)
    starting = create_run_for_test(instance, status=DagsterRunStatus.STARTING)
    newest_stream_run = create_run_for_test(instance, status=DagsterRunStatus.CANCELED, tags={STREAM_TAG: stream})

    config = RunRetentionConfig(max_age_days=7)
    assert delete_old_runs(instance, config) == []  # all of them are young

    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=8)
    deleted = delete_old_runs(instance, config, now=later)

    assert set(deleted) == {old_success.run_id, old_failure.run_id, old_stream_run.run_id}
    remaining = {run.run_id for run in instance.get_runs()}
    assert remaining == {started.run_id, starting.run_id, newest_stream_run.run_id}
    assert instance.get_records_for_run(old_success.run_id).records == []


def test_the_code_location_schedules_the_run_retention_job():
    from orchestration.definitions import defs
    from orchestration.names import RUN_RETENTION_JOB, RUN_RETENTION_SCHEDULE

    schedule = defs.resolve_schedule_def(RUN_RETENTION_SCHEDULE)
    assert schedule.job_name == RUN_RETENTION_JOB and schedule.default_status.value == "RUNNING"
    assert defs.resolve_job_def(RUN_RETENTION_JOB) is not None
