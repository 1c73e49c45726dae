"""The resizing asset `<stream>_layout`: the stream's partition layout, rescaled by a run.

A run of `<stream>_resize_job` (requested by the elasticity sensor, or launched by hand from
the UI with a config) changes the elastic stage from N to N' channels:

- `dry_run`: only the plan (moved hash ranges, share of the ring moved vs the ideal, channels
  before/after, a plot of each channel's share) as an AssetObservation; nothing moves;
- the stream is running (its Dagster run is active, or its checkpoint shows a batch within
  `alive_within_s`): a `RescaleRequest` goes to its control folder, the stream applies it at
  its next batch boundary (donate -> vertical barrier -> collect -> commit) and answers;
- the stream is stopped: the migration runs here on its state (`Migrator`, after `recover()`),
  or is refused with the reason when that is unsafe (see `realizer.rescale_offline`).

The materialization carries the cost (keys and bytes moved, share moved vs ideal, pause and
per-phase milliseconds), the controller's rule and reason, and the share plot.
"""

import base64
from typing import Any, Literal

from dagster import (
    AssetExecutionContext,
    AssetObservation,
    AssetsDefinition,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    RunsFilter,
    asset,
)
from pydantic import Field

from elasticity.state import uris
from orchestration.names import (
    ELASTICITY_GROUP,
    RESCALE_TAG,
    RESIZE_MAX_WAIT_S,
    layout_asset_key,
    rescale_tag_value,
    stream_asset_key,
    stream_job_name,
)
from orchestration.resources import EspSettingsResource
from orchestration.runs import ACTIVE_RUN_STATUSES
from orchestration.streams.catalog import StreamEntry, stream_spec
from pipelines.streams.control import RescaleResult
from pipelines.streams.names import FIRST_STAGE


class RescaleTargetConfig(Config):
    """The layout wanted: scale to N channels, or split / merge one channel (by layout channel id)."""

    op: Literal["scale_to", "split", "merge"] = Field("scale_to", description="scale_to N | split c | merge c.")
    channels: int | None = Field(None, ge=1, description="scale_to: the channel count wanted.")
    channel: int | None = Field(None, ge=0, description="split/merge: the channel id (as in the layout).")


class LayoutConfig(Config):
    """How to rescale; every field but the target has a default."""

    target: RescaleTargetConfig = Field(description="The layout wanted.")
    dry_run: bool = Field(False, description="Only show the plan (moved ranges, fraction vs ideal); move no state.")
    reason: str = Field("manual", description="Why (the controller's sentence when the sensor asks).")
    rule: str = Field("manual", description="The controller rule that decided (P1..P6, split, merge) or 'manual'.")
    timeout_s: float = Field(
        300.0, gt=0, le=RESIZE_MAX_WAIT_S, description="How long to wait for a running stream to apply the rescale."
    )
    alive_within_s: float = Field(
        120.0, gt=0, description="A stream whose checkpoint began or committed a batch this recently counts as running."
    )
    allow_offline: bool = Field(True, description="Migrate a stopped stream's state here (False: refuse instead).")


def _png_markdown(png: bytes, caption: str) -> MetadataValue:
    return MetadataValue.md(f"![{caption}](data:image/png;base64,{base64.b64encode(png).decode()})")


def _plan_metadata(plan, plot_path: str, png: bytes) -> dict[str, Any]:
    summary = plan.summary()
    return {
        **{k: v for k, v in summary.items() if not k.startswith("channel_ids")},
        "channel_ids_before": MetadataValue.json(summary["channel_ids_before"]),
        "channel_ids_after": MetadataValue.json(summary["channel_ids_after"]),
        "moved_hash_ranges": MetadataValue.md(plan.ranges_markdown()),
        "ring_shares": _png_markdown(png, "share of the ring per channel, before and after"),
        "ring_shares_png": MetadataValue.path(str(plot_path)),
    }


def _cost_metadata(result: RescaleResult) -> dict[str, Any]:
    metadata: dict[str, Any] = {"mode": result.mode, "pause_ms": round(result.pause_ms, 1)}
    if result.executors is not None:  # executors follow channels: the count the new layout asked for
        metadata["executors"] = result.executors
    report = result.report
    if report is None:  # answered from the migration's record after a restart: the figures are gone
        return {**metadata, "recovered": result.recovered}
    return {
        **metadata,
        "operation": report.operation,
        "channels_before": report.channels_before,
        "channels_after": report.channels_after,
        "keys_moved": report.keys_moved,
        "keys_total": report.keys_total or 0,
        "bytes_moved": report.bytes_moved,
        "fraction_moved": report.fraction_moved or 0.0,
        "ideal_fraction": report.ideal_fraction,
        "ring_fraction_moved": report.ring_fraction,
        **{f"{phase}_ms": round(ms, 1) for phase, ms in report.phase_ms.items()},
    }


def stream_is_running(
    context: AssetExecutionContext, entry: StreamEntry, files, alive_within_s: float
) -> tuple[bool, str]:
    """Whether a live process consumes the stream's control folder, and how we know."""
    runs = context.instance.get_runs(
        filters=RunsFilter(job_name=stream_job_name(entry.name), statuses=ACTIVE_RUN_STATUSES), limit=1
    )
    if runs:
        return True, f"its Dagster run {runs[0].run_id[:8]} is {runs[0].status.value}"
    age = files.heartbeat_age_s()
    if age is not None and age <= alive_within_s:
        return True, f"its checkpoint moved {age:.0f} s ago"
    return False, "it never ran" if age is None else f"its checkpoint last moved {age:.0f} s ago"


def make_layout_asset(entry: StreamEntry, stage: str = FIRST_STAGE) -> AssetsDefinition:
    """The resizing asset of one elastic stage of the stream (a multi-stage job has one per stage)."""
    key = layout_asset_key(entry.name, stage)
    which = "elastic stage" if stage == FIRST_STAGE else f"elastic stage `{stage}`"
    plot_prefix = "" if stage == FIRST_STAGE else f"{stage}-"

    @asset(
        key=key,
        group_name=ELASTICITY_GROUP,
        deps=[stream_asset_key(entry.name)],
        output_required=False,
        description=f"The partition layout of the `{entry.name}` stream's {which}; a run rescales it "
        "(online at a batch boundary, or offline on a stopped stream) and records the cost.",
        op_tags={RESCALE_TAG: rescale_tag_value(entry.name, stage)},
    )
    def layout_asset(context: AssetExecutionContext, config: LayoutConfig, esp_settings: EspSettingsResource):
        from orchestration.elasticity.realizer import (
            OfflineRefused,
            describe_target,
            plan_rescale,
            rescale_offline,
            rescale_online,
            result_json,
            write_share_plot,
        )
        from pipelines.streams.control import RescaleTarget
        from pipelines.streams.files import StreamFiles

        spec = stream_spec(esp_settings.load(), entry)
        files = StreamFiles(spec, stage)
        current = files.committed_layout()
        if current is None:
            raise Failure(
                f"stream {entry.name} has no committed layout under {files.paths.elastic}: start it once first"
            )
        target = RescaleTarget(**config.target.model_dump())
        try:
            plan = plan_rescale(current, target)
        except ValueError as error:
            raise Failure(f"cannot {describe_target(target)} from layout epoch {current.epoch}: {error}") from None
        plots = spec.plots_dir

        if config.dry_run:
            path = uris.join(plots, f"{plot_prefix}plan-e{plan.after.epoch}.png")
            context.log.info(
                "dry run: %s would move %.1f%% of the ring (ideal %.1f%%)",
                describe_target(target),
                100 * plan.ring_fraction,
                100 * plan.ideal_fraction,
            )
            yield AssetObservation(
                asset_key=key,
                metadata={
                    "dry_run": True,
                    "target": describe_target(target),
                    "reason": config.reason,
                    **_plan_metadata(plan, path, write_share_plot(plan, path)),
                },
            )
            return

        running, why = stream_is_running(context, entry, files, config.alive_within_s)
        reason = f"{config.reason} [{config.rule}]"
        if running:
            context.log.info(
                "stream %s is running (%s): requesting %s at its next batch boundary",
                entry.name,
                why,
                describe_target(target),
            )
            try:
                result = rescale_online(spec, target, reason, config.timeout_s, plan=plan, stage=stage)
            except (TimeoutError, RuntimeError) as error:
                raise Failure(str(error)) from None
        elif not config.allow_offline:
            raise Failure(f"stream {entry.name} is not running ({why}) and allow_offline is false")
        else:
            context.log.info("stream %s is not running (%s): migrating its state offline", entry.name, why)
            try:
                result = rescale_offline(spec, target, reason, plan=plan, stage=stage)
            except OfflineRefused as refused:
                raise Failure(f"offline rescale refused: {refused}") from None
        if not result.committed or result.layout is None:
            raise Failure(
                f"the stream refused or failed the rescale: {result.error}",
                metadata={"result": result_json(result)},
            )
        # The stream applied the planned layout under the next free epoch (epochs are never reused).
        after = result.layout
        if after.renumbered(plan.after.epoch) != plan.after:
            raise Failure(f"the stream committed layout epoch {after.epoch}, which is not the one planned")
        done = plan.renumbered(after.epoch)
        path = uris.join(plots, f"{plot_prefix}layout-e{after.epoch}.png")
        metadata = {
            **_plan_metadata(done, path, write_share_plot(done, path)),
            **_cost_metadata(result),
            "target": describe_target(target),
            "reason": config.reason,
            "rule": config.rule,
            "stream_was": why,
            "layout_epoch": after.epoch,
        }
        context.log.info("rescaled %s: %s", entry.name, result_json(result))
        yield MaterializeResult(metadata=metadata)

    return layout_asset
