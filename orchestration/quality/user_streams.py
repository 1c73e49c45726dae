"""The data-quality definitions esp generates for each declared user stream (a `pipelines.api.Job`
in the stream catalog), beside the built-in pipelines' (`orchestration.quality.checks`):

- `<s>_results` and `<s>_dead_letters`, the stream's results table and dead-letter topic;
- `<s>_results` · `results_suite` — GX on the results' latest view: the job's result key columns
  and `batch_id` not null, one row per result key, plus the job's own expectations
  (`Job.expectations`);
- `<s>_results` · `reconciliation` — every closed day, the results equal the job's daily batch
  recomputation (`pipelines.api.Recompute`; a job without one fails this check, saying so);
- `<s>_layout` · `state_after_rescale` — GX on the census of the elastic state (each key and its
  timers stored once, in the channel its hash routes to; nothing outside the layout);
- `<s>_dead_letters` · `dead_letter_volume` — as for the built-in pipelines.

The job is imported when a check runs, not when the code location loads: a broken job module
fails its stream's checks, not every definition of the code location.
"""

from typing import Any

from dagster import AssetCheckExecutionContext, AssetCheckResult, AssetChecksDefinition, asset_check

from orchestration.backfills.targets import user_target
from orchestration.names import RESULTS_SUITE_CHECK, results_asset_key, results_suite_name
from orchestration.quality.checks import (
    CheckConfig,
    make_reconciliation_check,
    make_state_check,
    make_stream_dead_letter_check,
    stream_table_assets,
    validate_results,
)
from orchestration.quality.gx_validation import GreatExpectationsResource, import_gx
from orchestration.quality.state_check import check_user_state, has_results
from orchestration.quality.suites import latest_view
from orchestration.resources import EspSettingsResource, EspSparkResource
from orchestration.streams.catalog import StreamEntry, is_user_stream, stream_spec
from pipelines.api import Job, load_job
from pipelines.settings import EspSettings
from pipelines.streams.spec import StreamSpec


def _spec_of(entry: StreamEntry):
    def spec_of(settings: EspSettings, root: str | None) -> StreamSpec:
        spec = stream_spec(settings, entry)
        return spec if root is None else spec.model_copy(update={"root": root})

    return spec_of


def results_expectations(job: Job) -> list[Any]:
    """esp's generic expectations on a user job's latest results, then the job's own."""
    gxe = import_gx().expectations
    keys = list(job.result_key_columns)
    expectations: list[Any] = [gxe.ExpectColumnValuesToNotBeNull(column=c) for c in [*keys, "batch_id"]]
    if len(keys) == 1:
        expectations.append(gxe.ExpectColumnValuesToBeUnique(column=keys[0]))
    else:
        expectations.append(gxe.ExpectCompoundColumnsToBeUnique(column_list=keys))
    return expectations + (list(job.expectations()) if job.expectations is not None else [])


def make_user_results_suite_check(entry: StreamEntry) -> AssetChecksDefinition:
    @asset_check(
        asset=results_asset_key(entry.name),
        name=RESULTS_SUITE_CHECK,
        description="GX: result keys and batch ids not null, one row per result key in the latest view, and the "
        "job's own expectations.",
    )
    def results_suite(
        context: AssetCheckExecutionContext,
        config: CheckConfig,
        esp_settings: EspSettingsResource,
        spark: EspSparkResource,
        gx: GreatExpectationsResource,
    ) -> AssetCheckResult:
        spec = _spec_of(entry)(esp_settings.load(), config.stream_root)
        if not has_results(spec.results_table):
            return AssetCheckResult(
                passed=True, description="no results table yet", metadata={"table": spec.results_table}
            )
        job = load_job(entry.job)
        keys = list(job.result_key_columns)
        frame = latest_view(spark.spark_session, spec.results_table, keys)
        suite = results_suite_name(entry.name)
        return validate_results(context, gx, frame, suite, results_expectations(job), keys, spec.results_table, config)

    return results_suite


def make_user_state_check(entry: StreamEntry) -> AssetChecksDefinition:
    return make_state_check(
        entry.name,
        lambda spec, gx, limit: check_user_state(entry.name, spec, gx),
        "GX on the state under the committed layout: each key (and its timers) stored once, in the channel "
        "its hash routes to, no state left outside the layout.",
    )


def user_stream_quality(entries: list[StreamEntry]) -> tuple[list[Any], list[AssetChecksDefinition]]:
    """(table assets, checks) of every user stream among `entries`."""
    users = [e for e in entries if is_user_stream(e)]
    assets = [
        spec
        for e in users
        for spec in stream_table_assets(
            e.name, True, f"`{e.name}` results: the rows its job ({e.job}) emitted, per batch."
        )
    ]
    checks = [make_user_results_suite_check(e) for e in users]
    checks += [make_reconciliation_check(user_target(e)) for e in users]
    checks += [make_user_state_check(e) for e in users]
    checks += [make_stream_dead_letter_check(e.name, _spec_of(e)) for e in users]
    return assets, checks
