"""Old finished runs are deleted with their event logs; runs not ended and each stream's newest run are kept."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

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


def test_a_deleted_run_leaves_neither_its_logs_nor_its_event_database(tmp_path):
    from dagster import job, op

    @op
    def says_hello(context) -> None:
        print("hello")  # captured into the run's compute logs

    @job
    def hello() -> None:
        says_hello()

    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        run_id = hello.execute_in_process(instance=instance).run_id
        run_files = [tmp_path / "storage" / run_id, Path(instance.event_log_storage.path_for_shard(run_id))]
        assert all(p.exists() for p in run_files)  # its compute logs and its event database
        later = dt.datetime.now(dt.UTC) + dt.timedelta(days=8)
        assert delete_old_runs(instance, RunRetentionConfig(max_age_days=7), now=later) == [run_id]
        assert not any(p.exists() for p in run_files)


def test_share_plots_older_than_the_age_go_with_their_runs_and_younger_ones_stay(tmp_path):
    import os

    from orchestration.platform.run_retention import delete_old_plots
    from orchestration.streams.catalog import stream_spec
    from pipelines.settings import EspSettings

    settings = EspSettings(project_root=tmp_path, run_dir_name=str(tmp_path / "run"))
    now = dt.datetime.now(dt.UTC)
    written = {"layout-e1.png": 9.0, "layout-e2.png": 6.0, "plan-e3.png": 1.0}  # days ago
    folders = [Path(stream_spec(settings, entry).control_dir) / "plots" for entry in STREAMS]
    for folder in folders:
        folder.mkdir(parents=True)
        (folder / "notes.txt").write_text("not a plot")
        for name, days_ago in written.items():
            (folder / name).write_bytes(b"png")
            stamp = (now - dt.timedelta(days=days_ago)).timestamp()
            os.utime(folder / name, (stamp, stamp))

    deleted = delete_old_plots(settings, RunRetentionConfig(max_age_days=7), now=now)

    assert sorted(deleted) == sorted(str(folder / "layout-e1.png") for folder in folders)
    for folder in folders:
        assert sorted(p.name for p in folder.iterdir()) == ["layout-e2.png", "notes.txt", "plan-e3.png"]
