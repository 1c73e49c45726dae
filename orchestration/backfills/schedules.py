"""The nightly backfill: at 01:15 UTC, recompute yesterday's partition of every pipeline."""

import datetime as dt

from dagster import (
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    define_asset_job,
    schedule,
)

from orchestration.backfills.targets import DAILY_PARTITIONS
from orchestration.executors import SHORT_JOB_EXECUTOR
from orchestration.names import BACKFILL_TAG, DAILY_RECOMPUTE_JOB, NIGHTLY_BACKFILL_SCHEDULE

NIGHTLY_CRON = "15 1 * * *"


def daily_recompute_job(daily_assets: list):  # -> dagster's unresolved asset job
    return define_asset_job(
        DAILY_RECOMPUTE_JOB,
        selection=daily_assets,
        partitions_def=DAILY_PARTITIONS,
        description="Recompute the daily batch tables of every pipeline for one day.",
        tags={BACKFILL_TAG: "scheduled"},
        executor_def=SHORT_JOB_EXECUTOR,
    )


def yesterday_of(moment: dt.datetime) -> dt.date:
    """The last closed UTC day at `moment`."""
    return moment.astimezone(dt.UTC).date() - dt.timedelta(days=1)


def nightly_backfill_schedule(job) -> ScheduleDefinition:
    @schedule(
        name=NIGHTLY_BACKFILL_SCHEDULE,
        job=job,
        cron_schedule=NIGHTLY_CRON,
        execution_timezone="UTC",
        default_status=DefaultScheduleStatus.RUNNING,
        description="Every night, recompute yesterday's partition (the day that just closed).",
    )
    def nightly(context: ScheduleEvaluationContext) -> RunRequest:
        day = yesterday_of(context.scheduled_execution_time).isoformat()
        # run_key = the day: a tick evaluated twice never launches the same day twice.
        return RunRequest(run_key=f"nightly-{day}", partition_key=day)

    return nightly
