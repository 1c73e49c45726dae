"""Definitions of the health domain: per catalogued stream the dashboard asset and the SLO,
dead-letter rate and freshness checks on its stream asset; the run-failure alert sensor; the
health job (dashboards + checks) on a schedule every few minutes, and Dagster's freshness sensor.

`health_definitions(...)` builds them for any stream entries and default policy (the e2e tests
call it with their own); `defs` is the code location's set.
"""

from collections.abc import Sequence

from dagster import AssetSelection, AssetSpec, Definitions, define_asset_job

from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.elasticity.sensor import DEFAULT_INTERVAL_S
from orchestration.executors import SHORT_JOB_EXECUTOR
from orchestration.health.alerts import make_run_failure_sensor
from orchestration.health.checks import (
    DEFAULT_STALE_AFTER_S,
    freshness_checks,
    freshness_sensor,
    make_dead_letter_rate_check,
    make_slo_check,
)
from orchestration.health.dashboard import make_dashboard_asset
from orchestration.names import (
    ALERTS_ASSET_KEY,
    HEALTH_GROUP,
    HEALTH_JOB,
    HEALTH_SCHEDULE,
)
from orchestration.schedules import utc_schedule
from orchestration.streams.catalog import StreamEntry, catalog_streams, entry_policy

HEALTH_CRON = "*/5 * * * *"


def health_definitions(
    entries: Sequence[StreamEntry] | None = None,
    policy: ElasticityPolicy | None = None,
    stale_after_s: int = DEFAULT_STALE_AFTER_S,
    freshness_interval_s: int = 30,
    with_schedule: bool = True,
) -> Definitions:
    """`with_schedule=False` leaves out the health schedule (tests that must not run the job by the clock)."""
    default = policy or ElasticityPolicy(sample_period_s=float(DEFAULT_INTERVAL_S))
    entries = catalog_streams() if entries is None else entries
    dashboards = [make_dashboard_asset(entry, entry_policy(entry, default)) for entry in entries]
    checks = [make_slo_check(entry, entry_policy(entry, default)) for entry in entries]
    checks += [make_dead_letter_rate_check(entry) for entry in entries]
    fresh = list(freshness_checks(entries, stale_after_s))
    alerts = AssetSpec(
        ALERTS_ASSET_KEY, group_name=HEALTH_GROUP, description="One materialization per failed stream or resize run."
    )
    job = define_asset_job(
        HEALTH_JOB,
        selection=AssetSelection.assets(*dashboards) | AssetSelection.checks(*checks, *fresh),
        description="Render each stream's dashboard; run its SLO, dead-letter rate and freshness checks.",
        executor_def=SHORT_JOB_EXECUTOR,
    )
    schedule = utc_schedule(HEALTH_SCHEDULE, job, HEALTH_CRON, "Every stream's dashboard and health checks.")
    return Definitions(
        assets=[*dashboards, alerts],
        asset_checks=[*checks, *fresh],
        jobs=[job],
        schedules=[schedule] if with_schedule else [],
        sensors=[make_run_failure_sensor(entries), freshness_sensor(fresh, freshness_interval_s)],
    )


defs = health_definitions()
