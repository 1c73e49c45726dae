"""Definitions of the backfills domain: bronze archives, daily batch assets, nightly schedule."""

from dagster import Definitions

from orchestration.backfills.assets import bronze_asset, make_daily_asset
from orchestration.backfills.schedules import daily_recompute_job, nightly_backfill_schedule
from orchestration.backfills.targets import targets


def _backfill_definitions() -> Definitions:
    bronze = [bronze_asset(t.name) for t in targets()]
    daily = [make_daily_asset(t) for t in targets()]
    job = daily_recompute_job(daily)
    return Definitions(assets=[*bronze, *daily], jobs=[job], schedules=[nightly_backfill_schedule(job)])


defs = _backfill_definitions()
