"""The Python API behind `esp backfill`: check a request, then materialize its days one by one
in this process (recorded in the esp Dagster instance, so the UI shows the partitions filled).

Why in-process rather than a backfill submitted to the daemon: it works with or without
`esp ui` running, reuses one Spark JVM for every day, and reports each day as it finishes
(the progress bar). Backfills launched from the UI use Dagster's own partition backfills on the
same asset, so both paths produce identical partitions and materialization records.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestration.backfills.targets import PARTITIONS_START, BatchTarget, batch_pipeline, spec_for, utc_today
from orchestration.names import BACKFILL_TAG, PIPELINE_TAG
from pipelines.batch.pipelines import BatchPipeline
from pipelines.batch.tables import bronze_batches, bronze_days, parse_day
from pipelines.settings import EspSettings
from pipelines.streams.spec import StreamSpec

MAX_DAYS = 3660
"""A guard against a typo turning into a decade of Spark jobs."""


class BackfillError(ValueError):
    """A backfill request that cannot run; the message says why and what would."""


@dataclass(frozen=True)
class BackfillPlan:
    pipeline: BatchPipeline
    spec: StreamSpec
    days: list[dt.date]
    empty_days: list[dt.date] = field(default_factory=list)


@dataclass(frozen=True)
class DayOutcome:
    day: dt.date
    success: bool
    metadata: dict[str, Any]
    error: str | None = None


def _as_day(value: str | dt.date, what: str) -> dt.date:
    if isinstance(value, dt.date):
        return value
    try:
        return parse_day(value)
    except ValueError as error:
        raise BackfillError(f"--{what}: {error}") from None


def plan_backfill(
    settings: EspSettings,
    pipeline_name: str,
    start: str | dt.date,
    end: str | dt.date,
    *,
    stream_root: str | None = None,
    today: dt.date | None = None,
) -> BackfillPlan:
    """Validate a request (pipeline, range, data present) and list its days."""
    try:
        pipeline = batch_pipeline(pipeline_name)
    except ValueError as error:
        raise BackfillError(str(error)) from None
    first, last = _as_day(start, "from"), _as_day(end, "to")
    today = today or utc_today()
    if first > last:
        raise BackfillError(f"--from {first} is after --to {last}")
    if last > today:
        raise BackfillError(
            f"{last} is in the future (today is {today} UTC); the latest day you can backfill is {today}"
        )
    if first < parse_day(PARTITIONS_START):
        raise BackfillError(f"daily partitions start on {PARTITIONS_START}; {first} is before that")
    days = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    if len(days) > MAX_DAYS:
        raise BackfillError(f"{len(days)} days is more than {MAX_DAYS}; split the range")
    spec = spec_for(settings, pipeline.name, stream_root)
    empty = [d for d in days if not bronze_batches(spec.bronze_table, d)]
    if len(empty) == len(days):
        raise BackfillError(_no_data_message(pipeline, spec, first, last))
    return BackfillPlan(pipeline, spec, days, empty)


def _no_data_message(pipeline: BatchPipeline, spec: StreamSpec, first: dt.date, last: dt.date) -> str:
    archived = bronze_days(spec.bronze_table)
    where = f"the bronze archive {spec.bronze_table}"
    if not archived and not spec.archive_input:
        return (
            f"no data for {pipeline.name}: stream {spec.name} runs with archive_input off, "
            "so it keeps no bronze archive"
        )
    if not archived:
        return f"no data for {pipeline.name} between {first} and {last}: {where} is empty (has the stream run?)"
    return (
        f"no data for {pipeline.name} between {first} and {last} in {where}; "
        f"it holds {len(archived)} day(s) from {archived[0]} to {archived[-1]}"
    )


def run_backfill(
    plan: BackfillPlan,
    *,
    settings_file: Path | None = None,
    instance: Any = None,
    on_day: Callable[[DayOutcome], None] = lambda outcome: None,
) -> list[DayOutcome]:
    """Materialize each day of the plan in order; a failed day is reported and the rest go on."""
    from dagster import materialize

    from orchestration.backfills.assets import make_daily_asset
    from orchestration.resources import EspSettingsResource, EspSparkResource

    settings = EspSettingsResource(config_file=str(settings_file) if settings_file else None)
    resources = {"esp_settings": settings, "spark": EspSparkResource(settings=settings)}
    asset = make_daily_asset(BatchTarget(plan.pipeline.name, lambda: plan.pipeline))
    run_config = {"ops": {asset.op.name: {"config": {"stream_root": plan.spec.root}}}}
    outcomes = []
    for day in plan.days:
        result = materialize(
            [asset],
            partition_key=day.isoformat(),
            resources=resources,
            run_config=run_config,
            instance=instance,
            raise_on_error=False,
            tags={BACKFILL_TAG: "cli", PIPELINE_TAG: plan.pipeline.name},
        )
        outcome = _outcome(day, result)
        outcomes.append(outcome)
        on_day(outcome)
    return outcomes


def _outcome(day: dt.date, result: Any) -> DayOutcome:
    if not result.success:
        failures = [e for e in result.all_events if e.is_step_failure]
        error = failures[0].step_failure_data.error if failures else None
        return DayOutcome(day, False, {}, error.message.strip() if error is not None else "run failed")
    events = result.get_asset_materialization_events()
    metadata = events[0].materialization.metadata if events else {}
    return DayOutcome(day, True, {k: v.value for k, v in metadata.items()})
