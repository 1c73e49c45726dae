"""Run retention: Dagster purges old schedule and sensor ticks itself (`retention:` in
infra/dagster.yaml) but never runs and their event logs. A daily schedule launches
`run_retention_job`, which deletes finished runs older than a configured age, and with them the
share plots the resize runs drew in each stream's control folder (a plot lives as long as the run
whose materialization shows it; the realizer also keeps at most `KEEP_PLOTS` per stream).

Never deleted: a run that has not ended (queued, starting, started: the stream's long-running
run among them), and the newest run of each stream, which its supervisor reads to decide on a
restart and its back-off.
"""

import datetime as dt
import os

from dagster import (
    Config,
    DagsterInstance,
    DagsterRunStatus,
    OpExecutionContext,
    RunsFilter,
    job,
    op,
)
from pydantic import Field

from orchestration.executors import SHORT_JOB_EXECUTOR
from orchestration.names import RUN_RETENTION_JOB, RUN_RETENTION_SCHEDULE, STREAM_TAG
from orchestration.resources import EspSettingsResource
from orchestration.schedules import utc_schedule
from pipelines.settings import EspSettings

FINISHED_STATUSES = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
RUN_RETENTION_CRON = "45 2 * * *"


class RunRetentionConfig(Config):
    max_age_days: float = Field(7.0, gt=0, description="Finished runs last updated longer ago than this are deleted.")
    max_runs: int = Field(
        5000, ge=1, description="At most this many runs deleted per run of the job (the rest next time)."
    )


def delete_old_runs(instance: DagsterInstance, config: RunRetentionConfig, now: dt.datetime | None = None) -> list[str]:
    """Delete the finished runs (and their event logs) older than `config.max_age_days`; their ids."""
    cutoff = _cutoff(config, now)
    old = instance.get_runs(
        filters=RunsFilter(statuses=list(FINISHED_STATUSES), updated_before=cutoff), limit=config.max_runs
    )
    kept = _newest_stream_runs(instance)
    deleted = []
    for run in old:
        if run.run_id not in kept and run.status in FINISHED_STATUSES:
            instance.delete_run(run.run_id)
            _delete_run_files(instance, run.run_id)
            deleted.append(run.run_id)
    return deleted


def delete_old_plots(settings: EspSettings, config: RunRetentionConfig, now: dt.datetime | None = None) -> list[str]:
    """Delete the share plots older than `config.max_age_days` of every catalogued stream; their paths."""
    from elasticity.state import uris
    from orchestration.elasticity.realizer import forget_plots_written_before
    from orchestration.streams.catalog import catalog_streams, stream_spec

    cutoff = _cutoff(config, now).timestamp()
    deleted = []
    for entry in catalog_streams():
        folder = stream_spec(settings, entry).plots_dir
        deleted += [uris.join(folder, name) for name in forget_plots_written_before(folder, cutoff)]
    return deleted


def _cutoff(config: RunRetentionConfig, now: dt.datetime | None) -> dt.datetime:
    return (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=config.max_age_days)


def _delete_run_files(instance: DagsterInstance, run_id: str) -> None:
    """What `delete_run` leaves on disk: the run's captured stdout/stderr, and with SQLite
    storage its event log's own database file (emptied, never removed): one of each per run,
    so a sensor launching runs all day would grow DAGSTER_HOME without bound."""
    instance.compute_log_manager.delete_logs(prefix=[run_id])
    shard_path = getattr(instance.event_log_storage, "path_for_shard", None)
    if shard_path is not None and os.path.exists(path := shard_path(run_id)):
        os.remove(path)


def _newest_stream_runs(instance: DagsterInstance) -> set[str]:
    """The newest run of every catalogued stream (whatever its status)."""
    from orchestration.streams.catalog import catalog_streams

    newest = set()
    for entry in catalog_streams():
        runs = instance.get_runs(filters=RunsFilter(tags={STREAM_TAG: entry.name}), limit=1)
        newest.update(run.run_id for run in runs)
    return newest


@op(description="Delete finished runs older than the configured age, with their event logs and share plots.")
def delete_old_runs_op(
    context: OpExecutionContext, config: RunRetentionConfig, esp_settings: EspSettingsResource
) -> None:
    deleted = delete_old_runs(context.instance, config)
    plots = delete_old_plots(esp_settings.load(), config)
    context.log.info(
        "deleted %d finished run(s) and %d share plot(s) older than %s day(s)",
        len(deleted),
        len(plots),
        config.max_age_days,
    )


@job(
    name=RUN_RETENTION_JOB,
    description="Delete finished Dagster runs older than a configured age.",
    executor_def=SHORT_JOB_EXECUTOR,
)
def run_retention_job() -> None:
    delete_old_runs_op()


run_retention_schedule = utc_schedule(
    RUN_RETENTION_SCHEDULE,
    run_retention_job,
    RUN_RETENTION_CRON,
    "Every night, delete finished runs older than 7 days (the job's config sets the age).",
)
