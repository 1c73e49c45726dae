"""Definitions of the data domains, merged into the code location with one line: quality (the
results and dead-letter tables as assets, their asset checks, the post-rescale state check, the
validation job and its schedule, the GX resource) and backfills (`orchestration.backfills`)."""

from dagster import AssetSelection, Definitions, define_asset_job

from orchestration.backfills.definitions import defs as backfill_defs
from orchestration.backfills.targets import pipelines
from orchestration.executors import SHORT_JOB_EXECUTOR
from orchestration.names import VALIDATION_JOB, VALIDATION_SCHEDULE, VALIDATION_TAG
from orchestration.quality.checks import pipeline_checks, table_assets
from orchestration.quality.gx_validation import GreatExpectationsResource
from orchestration.quality.user_streams import user_stream_quality
from orchestration.schedules import utc_schedule
from orchestration.streams.catalog import catalog_streams

VALIDATION_CRON = "0 2 * * *"
"""After the nightly backfill (01:15 UTC), so reconciliation sees yesterday's partition."""


def _quality_definitions() -> Definitions:
    assets = [spec for p in pipelines() for spec in table_assets(p)]
    checks = [check for p in pipelines() for check in pipeline_checks(p)]
    user_assets, user_checks = user_stream_quality(list(catalog_streams()))
    assets, checks = assets + user_assets, checks + user_checks
    validation_job = define_asset_job(
        VALIDATION_JOB,
        selection=AssetSelection.checks(*checks),
        description="Run every data-quality check: GX suites, reconciliation, dead letters, state.",
        tags={VALIDATION_TAG: "true"},
        executor_def=SHORT_JOB_EXECUTOR,
    )
    schedule = utc_schedule(
        VALIDATION_SCHEDULE, validation_job, VALIDATION_CRON, "Nightly validation run (all asset checks)."
    )
    return Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=[validation_job],
        schedules=[schedule],
        resources={"gx": GreatExpectationsResource()},
    )


quality_defs = _quality_definitions()
defs = Definitions.merge(backfill_defs, quality_defs)
