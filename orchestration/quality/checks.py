"""The asset checks of esp's data quality, one set per pipeline:

- `<p>_results` · `results_suite` — GX suite on the results table's latest view;
- `<p>_results` · `reconciliation` — every closed day of the stream equals the daily batch
  recomputation (`<p>_daily_counts`), key by key;
- `<p>_dead_letters` · `dead_letter_volume` — GX row-count expectation on the dead-letter topic's
  recent records; a WARN above the threshold;
- `<p>_layout` · `state_after_rescale` — GX suite on the census of the elastic state under the
  committed layout (routing, uniqueness, sum of counts vs the stream's own results).
"""

import time
from collections.abc import Callable
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetSpec,
    Config,
    MetadataValue,
    asset_check,
)
from pydantic import Field

from orchestration.backfills.targets import BatchTarget, is_catalogued, spec_for, utc_today
from orchestration.names import (
    DEAD_LETTER_VOLUME_CHECK,
    RECONCILIATION_CHECK,
    RESULTS_SUITE_CHECK,
    STATE_AFTER_RESCALE_CHECK,
    TABLES_GROUP,
    daily_counts_asset_key,
    dead_letters_asset_key,
    dead_letters_suite_name,
    layout_asset_key,
    results_asset_key,
    results_suite_name,
    stream_asset_key,
)
from orchestration.quality.dead_letters import read_dead_letters
from orchestration.quality.gx_validation import GreatExpectationsResource
from orchestration.quality.metadata import failure_description, suite_metadata
from orchestration.quality.state_check import StateCheck, check_state, has_results
from orchestration.quality.suites import dead_letter_expectations, latest_view, results_expectations, with_window_checks
from orchestration.resources import EspSettingsResource, EspSparkResource, KafkaResource
from pipelines.api import JobError
from pipelines.batch.pipelines import BatchPipeline
from pipelines.batch.reconcile import reconcile
from pipelines.settings import EspSettings
from pipelines.streams.names import dead_letter_topic
from pipelines.streams.spec import StreamSpec


class CheckConfig(Config):
    """Where the checked stream lives and how much evidence a check reports."""

    stream_root: str | None = Field(None, description="The stream's folder; default: <run dir>/streams/<pipeline>.")
    max_offending: int = Field(50, ge=1, description="At most this many offending keys in the check's metadata.")


class DeadLetterCheckConfig(CheckConfig):
    """The dead-letter volume that is still acceptable."""

    max_dead_letters: int = Field(
        100, ge=0, description="Warn when more dead letters than this arrived in the look-back window."
    )
    lookback_hours: float = Field(24.0, gt=0, description="How far back (Kafka record time) to count dead letters.")
    sample_cap: int = Field(10_000, ge=1, description="Read at most this many dead letters to tally their reasons.")
    topic: str | None = Field(None, description="The dead-letter topic; default: `<stream>.dlq`.")


# -- the tables the checks are on (produced by the stream run) ----------------------------------


def table_assets(pipeline: BatchPipeline) -> list[AssetSpec]:
    return stream_table_assets(
        pipeline.name,
        is_catalogued(pipeline.name),
        f"`{pipeline.name}` results: per micro-batch, the new count of every key it touched (Parquet).",
    )


def stream_table_assets(name: str, catalogued: bool, results_description: str) -> list[AssetSpec]:
    """The results table and dead-letter topic of stream `name`, downstream of its stream asset if it has one."""
    upstream = [stream_asset_key(name)] if catalogued else []
    return [
        AssetSpec(
            results_asset_key(name),
            deps=upstream,
            group_name=TABLES_GROUP,
            kinds={"parquet"},
            description=results_description,
        ),
        AssetSpec(
            dead_letters_asset_key(name),
            deps=upstream,
            group_name=TABLES_GROUP,
            kinds={"kafka"},
            description=f"Rejected `{name}` records with their reason (Kafka topic `{dead_letter_topic(name)}`).",
        ),
    ]


# -- checks -------------------------------------------------------------------------------------


def make_results_suite_check(pipeline: BatchPipeline) -> AssetChecksDefinition:
    @asset_check(
        asset=results_asset_key(pipeline.name),
        name=RESULTS_SUITE_CHECK,
        description="GX: keys and counts not null, counts >= 0, one row per key in the latest view"
        + (", windows aligned" if pipeline.window_columns else "")
        + ".",
    )
    def results_suite(
        context: AssetCheckExecutionContext,
        config: CheckConfig,
        esp_settings: EspSettingsResource,
        spark: EspSparkResource,
        gx: GreatExpectationsResource,
    ) -> AssetCheckResult:
        spec = spec_for(esp_settings.load(), pipeline.name, config.stream_root)
        if not has_results(spec.results_table):
            return AssetCheckResult(
                passed=True, description="no results table yet", metadata={"table": spec.results_table}
            )
        keys = list(pipeline.key_columns)
        frame = with_window_checks(
            latest_view(spark.spark_session, spec.results_table, keys), pipeline, spec.window_seconds
        )
        expectations = results_expectations(pipeline, spec.window_seconds)
        suite = results_suite_name(pipeline.name)
        return validate_results(context, gx, frame, suite, expectations, keys, spec.results_table, config)

    return results_suite


def validate_results(
    context: AssetCheckExecutionContext,
    gx: GreatExpectationsResource,
    frame: Any,
    suite: str,
    expectations: list[Any],
    keys: list[str],
    table: str,
    config: CheckConfig,
) -> AssetCheckResult:
    """The check result of a GX suite over a results table's latest view (`frame`)."""
    frame = frame.persist()  # GX computes many metrics over it
    try:
        outcome = gx.validate(frame, suite, expectations, [*keys, "batch_id"])
        rows = frame.count()
    finally:
        frame.unpersist()
    context.log.info("%s: %s", outcome.suite, failure_description(outcome))
    return AssetCheckResult(
        passed=outcome.success,
        description=failure_description(outcome),
        metadata={
            **suite_metadata(outcome, config.max_offending),
            "rows_validated": rows,
            "table": MetadataValue.path(table),
        },
    )


def make_reconciliation_check(target: BatchTarget) -> AssetChecksDefinition:
    @asset_check(
        asset=results_asset_key(target.name),
        name=RECONCILIATION_CHECK,
        additional_deps=[daily_counts_asset_key(target.name)],
        description="Every closed day: the stream's results equal the daily batch recomputation, key by key.",
    )
    def reconciliation(
        context: AssetCheckExecutionContext,
        config: CheckConfig,
        esp_settings: EspSettingsResource,
        spark: EspSparkResource,
    ) -> AssetCheckResult:
        spec = spec_for(esp_settings.load(), target.name, config.stream_root)
        if not has_results(spec.results_table):
            return AssetCheckResult(
                passed=True, description="no results table yet", metadata={"table": spec.results_table}
            )
        try:
            pipeline = target.pipeline()
        except JobError as error:
            return AssetCheckResult(passed=False, description=str(error))
        outcome = reconcile(spark.spark_session, pipeline, spec, utc_today(), config.max_offending)
        spans = [vars(s) for s in outcome.spans]
        description = f"{len(outcome.spans)} closed span(s) reconciled, {outcome.differing_keys} differing key(s)" + (
            f", result batches without bronze: {outcome.unattributed_batches}" if outcome.unattributed_batches else ""
        )
        return AssetCheckResult(
            passed=outcome.passed,
            description=description,
            metadata={
                "spans_reconciled": len(outcome.spans),
                "days_reconciled": sum(len(s.days) for s in outcome.spans),
                "differing_keys": outcome.differing_keys,
                "offending_keys": MetadataValue.json(outcome.differences),
                "spans": MetadataValue.json(spans),
                "skipped_days": MetadataValue.json(outcome.skipped),
                "unattributed_batches": MetadataValue.json(outcome.unattributed_batches),
            },
        )

    return reconciliation


SpecOf = Callable[[EspSettings, str | None], StreamSpec]
"""A checked stream's spec from the settings and an optional folder replacing its own."""


def make_dead_letter_check(pipeline: BatchPipeline) -> AssetChecksDefinition:
    return make_stream_dead_letter_check(pipeline.name, lambda settings, root: spec_for(settings, pipeline.name, root))


def make_stream_dead_letter_check(name: str, spec_of: SpecOf) -> AssetChecksDefinition:
    """The dead-letter volume check of stream `name` (any job: built in or a user's)."""

    @asset_check(
        asset=dead_letters_asset_key(name),
        name=DEAD_LETTER_VOLUME_CHECK,
        description="GX: at most `max_dead_letters` dead letters in the look-back window (a warning above).",
    )
    def dead_letter_volume(
        context: AssetCheckExecutionContext,
        config: DeadLetterCheckConfig,
        esp_settings: EspSettingsResource,
        kafka: KafkaResource,
        gx: GreatExpectationsResource,
    ) -> AssetCheckResult:
        spec = spec_of(esp_settings.load(), config.stream_root)
        since_ms = int((time.time() - config.lookback_hours * 3600) * 1000)
        topic = config.topic or spec.dead_letter_topic
        sample = read_dead_letters(
            kafka.connection(), topic, since_ms, cap=max(config.sample_cap, config.max_dead_letters + 1)
        )
        base = {
            "topic": topic,
            "volume": sample.volume,
            "threshold": config.max_dead_letters,
            "lookback_hours": config.lookback_hours,
            "reasons": MetadataValue.json(sample.reasons()),
        }
        if not sample.exists:
            return AssetCheckResult(
                passed=True, description="no dead-letter topic yet (the stream has not run)", metadata=base
            )
        outcome = gx.validate(
            sample.records,
            dead_letters_suite_name(name),
            dead_letter_expectations(config.max_dead_letters),
            ["source_topic", "source_partition", "source_offset"],
        )
        return AssetCheckResult(
            passed=outcome.success,
            severity=AssetCheckSeverity.WARN,
            description=(
                f"{sample.volume} dead letter(s) in {config.lookback_hours:g} h (threshold {config.max_dead_letters})"
            ),
            metadata={**base, **suite_metadata(outcome, config.max_offending)},
        )

    return dead_letter_volume


StateCheckOf = Callable[[StreamSpec, GreatExpectationsResource, int], StateCheck]
"""Runs a stream's state check: its spec, the GX resource, how many offending keys to show."""


def make_state_check(name: str, check: StateCheckOf, description: str) -> AssetChecksDefinition:
    @asset_check(asset=layout_asset_key(name), name=STATE_AFTER_RESCALE_CHECK, description=description)
    def state_after_rescale(
        context: AssetCheckExecutionContext,
        config: CheckConfig,
        esp_settings: EspSettingsResource,
        gx: GreatExpectationsResource,
    ) -> AssetCheckResult:
        from elasticity.migration.registry import RegistryError

        spec = spec_for(esp_settings.load(), name, config.stream_root)
        try:
            result = check(spec, gx, config.max_offending)
        except (RegistryError, FileNotFoundError) as error:
            return AssetCheckResult(passed=True, description=f"no elastic state yet ({error})")
        return _state_check_result(result, config, _last_rescale(context, name))

    return state_after_rescale


def make_pipeline_state_check(pipeline: BatchPipeline) -> AssetChecksDefinition:
    return make_state_check(
        pipeline.name,
        lambda spec, gx, limit: check_state(pipeline, spec, gx, limit),
        "GX on the state under the committed layout: each key stored once, in the channel its hash "
        "routes to; key count and sum of counts equal the stream's results up to the same batch.",
    )


def _state_check_result(result: StateCheck, config: CheckConfig, rescale: dict[str, Any]) -> AssetCheckResult:
    census = result.census
    metadata: dict[str, Any] = {
        **suite_metadata(result.suite, config.max_offending),
        "layout_epoch": census.layout.epoch,
        "channels": MetadataValue.json(list(census.layout.channels)),
        "state_batch": census.batch,
        "keys": census.keys,
        f"sum_of_{result.value_name.replace(' ', '_')}": census.total,
        "per_channel": MetadataValue.json({str(c): v for c, v in census.per_channel.items()}),
        "stray_channels": MetadataValue.json(census.stray_channels),
        "baseline": MetadataValue.json(result.baseline or {"note": "no baseline: routing checked, values not"}),
        "differing_keys": MetadataValue.json(result.differing_keys),
        **rescale,
    }
    problems = [failure_description(result.suite)] if not result.suite.success else []
    if result.differing_keys:
        problems.append(f"{len(result.differing_keys)} key(s) differ from the stream's results")
    if census.stray_channels:
        problems.append(f"state left in channels outside the layout: {census.stray_channels}")
    summary = f"{census.keys} keys, sum of {result.value_name} {census.total}, all routed to their channel"
    return AssetCheckResult(passed=result.passed, description="; ".join(problems) or summary, metadata=metadata)


def _last_rescale(context: AssetCheckExecutionContext, name: str) -> dict[str, Any]:
    """The resizing asset's latest MigrationReport figures, to show next to the census."""
    try:
        event = context.instance.get_latest_materialization_event(layout_asset_key(name))
    except Exception:  # an instance without that asset's history: nothing to show
        return {}
    if event is None or event.asset_materialization is None:
        return {}
    wanted = ("keys_moved", "keys_total", "old_epoch", "new_epoch", "operation")
    return {f"rescale_{k}": v.value for k, v in event.asset_materialization.metadata.items() if k in wanted}


def pipeline_checks(pipeline: BatchPipeline) -> list[AssetChecksDefinition]:
    return [
        make_results_suite_check(pipeline),
        make_reconciliation_check(BatchTarget(pipeline.name, lambda: pipeline)),
        make_dead_letter_check(pipeline),
        make_pipeline_state_check(pipeline),
    ]
