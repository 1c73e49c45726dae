"""The policy from the UI: `<stream>_set_policy_job` changes the stream's elasticity policy.

A run of the job (launched from the launchpad with a typed config: SLO, channel bounds, cooldown,
split/merge and automatic rescaling on or off) merges the fields it sets into the stream's
override file `elasticity-policy.json` (the one source of truth the sensor reads at every tick)
and materializes `<stream>_elasticity_policy` with the effective policy, so each change is on
record. A value the policy refuses fails the run with the reason and changes nothing.
"""

from typing import Any

from dagster import AssetExecutionContext, AssetsDefinition, Config, Failure, MaterializeResult, MetadataValue, asset
from pydantic import Field

from elasticity.layout import MAX_CHANNELS
from orchestration.elasticity.policy import ElasticityPolicy, PolicyFileError, change_policy, policy_path
from orchestration.names import ELASTICITY_GROUP, policy_asset_key, stream_asset_key
from orchestration.resources import EspSettingsResource
from orchestration.streams.catalog import StreamEntry, stream_spec


class PolicyChangeConfig(Config):
    """The policy fields to change; a field left out (null) keeps its current value. The bounds are
    checked by `ElasticityPolicy` (one set of rules for the file and the UI): a bad value fails
    the run with the field and the rule, and changes nothing."""

    slo_s: float | None = Field(None, description="Latency SLO in seconds, > 0 (p99 probe latency per channel).")
    min_channels: int | None = Field(None, description="Never fewer channels than this (>= 1).")
    max_channels: int | None = Field(None, description=f"Never more channels than this (<= {MAX_CHANNELS}).")
    cooldown_s: float | None = Field(None, description="No decision this long after a rescale decision (>= 0).")
    split_merge: bool | None = Field(None, description="Allow targeted split/merge of one channel.")
    auto_rescale: bool | None = Field(None, description="Let the sensor request rescale runs (false: explain only).")
    reset: bool = Field(False, description="Drop every earlier change first (back to the code location's defaults).")
    note: str = Field("", description="Why the change (recorded with it).")

    def changes(self) -> dict[str, Any]:
        fields = ("slo_s", "min_channels", "max_channels", "cooldown_s", "split_merge", "auto_rescale")
        return {name: getattr(self, name) for name in fields if getattr(self, name) is not None}


def policy_metadata(policy: ElasticityPolicy, changes: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """What a policy materialization records: the effective numbers, what changed, the stored overrides."""
    controller = policy.control_options().controller
    return {
        "slo_ms": policy.slo_s * 1000,
        "min_channels": policy.min_channels,
        "max_channels": policy.max_channels,
        "cooldown_s": controller.cooldown_s,
        "split_merge": policy.split_merge,
        "auto_rescale": policy.auto_rescale,
        "changed": MetadataValue.json(changes),
        "overrides": MetadataValue.json(overrides),
    }


def make_policy_asset(entry: StreamEntry, default: ElasticityPolicy) -> AssetsDefinition:
    @asset(
        key=policy_asset_key(entry.name),
        group_name=ELASTICITY_GROUP,
        deps=[stream_asset_key(entry.name)],
        description=f"The elasticity policy of the `{entry.name}` stream (SLO, channel bounds, cooldown, "
        "split/merge, automatic rescaling); the sensor applies it at its next tick.",
    )
    def elasticity_policy(
        context: AssetExecutionContext, config: PolicyChangeConfig, esp_settings: EspSettingsResource
    ) -> MaterializeResult:
        control_dir = stream_spec(esp_settings.load(), entry).control_dir
        changes = config.changes()
        try:
            policy, overrides = change_policy(control_dir, changes, default, reset=config.reset)
        except PolicyFileError as error:
            raise Failure(str(error)) from None
        context.log.info(
            "policy of %s: %s%s (file %s)",
            entry.name,
            changes or "no change",
            " after a reset" * config.reset,
            policy_path(control_dir),
        )
        metadata = policy_metadata(policy, changes, overrides)
        return MaterializeResult(metadata={**metadata, "note": config.note, "reset": config.reset})

    return elasticity_policy
