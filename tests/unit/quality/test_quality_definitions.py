"""The quality and backfill definitions, through Dagster's Python API: the schedules, the daily
partitions, which checks the validation job and each rescale run execute."""

from __future__ import annotations

import datetime as dt

from dagster import AssetCheckKey, AssetKey, build_schedule_context

CHECKS = {
    AssetCheckKey(AssetKey(f"{p}_{table}"), name)
    for p in ("wordcount", "adclicks")
    for table, name in (
        ("results", "results_suite"),
        ("results", "reconciliation"),
        ("dead_letters", "dead_letter_volume"),
        ("layout", "state_after_rescale"),
    )
}


def code_location():
    from orchestration.definitions import defs

    return defs


def test_the_validation_job_runs_every_check_and_is_scheduled_after_the_nightly_backfill():
    defs = code_location()
    job = defs.resolve_job_def("validation_job")

    assert job.asset_layer.asset_graph.asset_check_keys >= CHECKS
    schedule = defs.resolve_schedule_def("validation_schedule")
    assert schedule.job_name == "validation_job" and schedule.cron_schedule == "0 2 * * *"
    assert defs.resolve_schedule_def("nightly_backfill_schedule").cron_schedule == "15 1 * * *"


def test_every_rescale_run_also_runs_the_state_check():
    defs = code_location()
    for stream in ("wordcount", "adclicks"):
        job = defs.resolve_job_def(f"{stream}_resize_job")
        assert (
            AssetCheckKey(AssetKey(f"{stream}_layout"), "state_after_rescale")
            in job.asset_layer.asset_graph.asset_check_keys
        )


def test_the_nightly_schedule_recomputes_yesterday_once():
    defs = code_location()
    schedule = defs.resolve_schedule_def("nightly_backfill_schedule")
    moment = dt.datetime(2026, 11, 3, 1, 15, tzinfo=dt.UTC)
    context = build_schedule_context(scheduled_execution_time=moment, repository_def=defs.get_repository_def())

    request = schedule.evaluate_tick(context).run_requests[0]

    assert request.partition_key == "2026-11-02"
    assert request.run_key == "nightly-2026-11-02"


def test_daily_assets_are_partitioned_per_utc_day_up_to_today():
    from orchestration.backfills.targets import DAILY_PARTITIONS

    graph = code_location().resolve_asset_graph()
    for stream in ("wordcount", "adclicks"):
        assert graph.get(AssetKey(f"{stream}_daily_counts")).partitions_def == DAILY_PARTITIONS
    keys = DAILY_PARTITIONS.get_partition_keys(current_time=dt.datetime(2026, 11, 22, 5, tzinfo=dt.UTC))
    assert keys[0] == "2025-01-01" and keys[-1] == "2026-11-22"
