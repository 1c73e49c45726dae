"""The quality and backfill definitions, through Dagster's Python API: the schedules, the daily
partitions, which checks the validation job and each rescale run execute."""

from __future__ import annotations

import datetime as dt

from dagster import AssetCheckKey, build_schedule_context

from orchestration.names import (
    DEAD_LETTER_VOLUME_CHECK,
    NIGHTLY_BACKFILL_SCHEDULE,
    RECONCILIATION_CHECK,
    RESULTS_SUITE_CHECK,
    STATE_AFTER_RESCALE_CHECK,
    VALIDATION_JOB,
    VALIDATION_SCHEDULE,
    daily_counts_asset_key,
    dead_letters_asset_key,
    layout_asset_key,
    resize_job_name,
    results_asset_key,
)

STREAMS = ("wordcount", "adclicks")
CHECKS = {
    AssetCheckKey(key(p), name)
    for p in STREAMS
    for key, name in (
        (results_asset_key, RESULTS_SUITE_CHECK),
        (results_asset_key, RECONCILIATION_CHECK),
        (dead_letters_asset_key, DEAD_LETTER_VOLUME_CHECK),
        (layout_asset_key, STATE_AFTER_RESCALE_CHECK),
    )
}


def code_location():
    from orchestration.definitions import defs

    return defs


def test_the_validation_job_runs_every_check_and_is_scheduled_after_the_nightly_backfill():
    defs = code_location()
    job = defs.resolve_job_def(VALIDATION_JOB)

    assert job.asset_layer.asset_graph.asset_check_keys >= CHECKS
    schedule = defs.resolve_schedule_def(VALIDATION_SCHEDULE)
    assert schedule.job_name == VALIDATION_JOB and schedule.cron_schedule == "0 2 * * *"
    assert defs.resolve_schedule_def(NIGHTLY_BACKFILL_SCHEDULE).cron_schedule == "15 1 * * *"


def test_every_rescale_run_also_runs_the_state_check():
    defs = code_location()
    for stream in STREAMS:
        job = defs.resolve_job_def(resize_job_name(stream))
        assert (
            AssetCheckKey(layout_asset_key(stream), STATE_AFTER_RESCALE_CHECK)
            in job.asset_layer.asset_graph.asset_check_keys
        )


def test_the_nightly_schedule_recomputes_yesterday_once():
    defs = code_location()
    schedule = defs.resolve_schedule_def(NIGHTLY_BACKFILL_SCHEDULE)
    moment = dt.datetime(2026, 11, 3, 1, 15, tzinfo=dt.UTC)
    context = build_schedule_context(scheduled_execution_time=moment, repository_def=defs.get_repository_def())

    request = schedule.evaluate_tick(context).run_requests[0]

    assert request.partition_key == "2026-11-02"
    assert request.run_key == "nightly-2026-11-02"


def test_daily_assets_are_partitioned_per_utc_day_up_to_today():
    from orchestration.backfills.targets import DAILY_PARTITIONS

    graph = code_location().resolve_asset_graph()
    for stream in STREAMS:
        assert graph.get(daily_counts_asset_key(stream)).partitions_def == DAILY_PARTITIONS
    keys = DAILY_PARTITIONS.get_partition_keys(current_time=dt.datetime(2026, 11, 22, 5, tzinfo=dt.UTC))
    assert keys[0] == "2025-01-01" and keys[-1] == "2026-11-22"
