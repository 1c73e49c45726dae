"""Stream assets: a run of `<name>_stream` owns the streaming query for as long as it lives.

The run reports the stream's health every few seconds as AssetObservations (throughput, lag,
probe latency percentiles, channels), so the asset's page in the UI is its live dashboard.
Terminating the run stops the query at a batch boundary.
"""

import time
from enum import StrEnum

from dagster import (
    AssetExecutionContext,
    AssetObservation,
    AssetsDefinition,
    Config,
    MaterializeResult,
    MetadataValue,
    asset,
)
from pydantic import Field

from orchestration.names import STREAM_TAG, STREAMS_GROUP, stream_asset_key
from orchestration.resources import EspSettingsResource, EspSparkResource
from orchestration.streams.catalog import StreamEntry, stream_spec
from orchestration.streams.stop import clear_stop_marker

LAST_UPDATED_KEY = "dagster/last_updated_timestamp"


class SnapshotPolicyName(StrEnum):
    """A snapshot policy a run config names (Dagster's config takes an Enum where it takes no optional Literal)."""

    ADAPTIVE = "adaptive"
    FIXED = "fixed"


class StreamRunConfig(Config):
    """How a stream run starts; each option has a default."""

    channels: int | None = Field(
        None, ge=1, description="Channels of the elastic stage on the very first start (None: the stream's setting)."
    )
    trigger_seconds: float | None = Field(
        None, gt=0, description="Micro-batch trigger interval (None: the stream's setting)."
    )
    max_offsets_per_trigger: int | None = Field(
        None, description="Cap on records per micro-batch (None: the stream's setting)."
    )
    max_records_per_channel: int | None = Field(
        None,
        ge=1,
        description="Cap on records per micro-batch per channel, so a rescale's wait for the batch in flight stays "
        "bounded (None: the stream's setting, off by default).",
    )
    observe_every_s: float = Field(5.0, gt=0, description="Seconds between AssetObservations.")
    max_runtime_s: float | None = Field(
        None, description="Stop by itself after this long (None: run until terminated)."
    )
    input_topic: str | None = Field(None, description="Input topic; default the stream's own.")
    compact_every_batches: int | None = Field(
        None, ge=0, description="Compact the results every N batches (0: never; None: StreamSpec's default, 100)."
    )
    bronze_retention_days: float | None = Field(
        None, gt=0, description="Days of bronze archive kept, fractions allowed (None: StreamSpec's default, 7)."
    )
    admission_high_watermark_s: float | None = Field(
        None,
        gt=0,
        description="Admission control: cap the records per batch while batches run longer (None: the stream's "
        "setting, off by default).",
    )
    admission_low_watermark_s: float | None = Field(
        None, gt=0, description="Admission control lifts its cap below this batch duration (None: 0.4 × the high)."
    )
    snapshot_policy: SnapshotPolicyName | None = Field(
        None,
        description="When channels snapshot: adaptive (seed 003's recovery bound) or a fixed period (None: the "
        "stream's setting, adaptive by default).",
    )
    max_recovery_s: float | None = Field(
        None, gt=0, description="Adaptive snapshots: the predicted recovery never to pass (None: 3 s)."
    )
    snapshot_period_s: float | None = Field(
        None,
        gt=0,
        description="Snapshot period: adaptive's checkpoint period (None: 9 s), or fixed's (None: 25 batches).",
    )


def run_options(config: StreamRunConfig) -> dict[str, object]:
    """The StreamSpec options the run config sets; the others keep the stream's declared settings
    (or StreamSpec's defaults): one source per setting."""
    from elasticity.admission import AdmissionOptions
    from elasticity.snapshots.planner import SnapshotOptions

    options: dict[str, object | None] = {
        "input_topic": config.input_topic,
        "channels": config.channels,
        "trigger_seconds": config.trigger_seconds,
        "max_offsets_per_trigger": config.max_offsets_per_trigger,
        "max_records_per_channel": config.max_records_per_channel,
        "compact_every_batches": config.compact_every_batches,
        "bronze_retention_days": config.bronze_retention_days,
        "admission": AdmissionOptions.from_watermarks(
            config.admission_high_watermark_s, config.admission_low_watermark_s
        ),
    }
    if (config.snapshot_policy, config.max_recovery_s, config.snapshot_period_s) != (None, None, None):
        policy = (config.snapshot_policy or SnapshotPolicyName.ADAPTIVE).value
        options["snapshots"] = SnapshotOptions.choose(policy, config.max_recovery_s, config.snapshot_period_s)
    return {name: value for name, value in options.items() if value is not None}


def make_stream_asset(entry: StreamEntry) -> AssetsDefinition:
    key = stream_asset_key(entry.name)

    @asset(
        key=key,
        group_name=STREAMS_GROUP,
        description=f"The long-running `{entry.name}` stream ({entry.job}); a run of it owns the query.",
        op_tags={STREAM_TAG: entry.name},
    )
    def stream_asset(
        context: AssetExecutionContext,
        config: StreamRunConfig,
        esp_settings: EspSettingsResource,
        spark: EspSparkResource,
    ) -> MaterializeResult:
        from pipelines.streams.heartbeat import HeartbeatWriter
        from pipelines.streams.runner import refuse_if_held
        from pipelines.streams.service import StreamService

        settings = esp_settings.load()
        spec = stream_spec(settings, entry, **run_options(config))
        refuse_if_held(spec)  # before the Spark session: a second writer fails at once
        if clear_stop_marker(spec.control_dir):
            context.log.info("%s was stopped by hand; this run starts it again", entry.name)
        service = StreamService(spark.spark_session, spec, settings.spark.executors)
        observations = []

        def observe(observation) -> None:
            observations.append(observation)
            # The timestamp key makes the observation count for Dagster's freshness check.
            metadata = {**observation.as_metadata(), LAST_UPDATED_KEY: MetadataValue.timestamp(time.time())}
            context.log_event(AssetObservation(asset_key=key, metadata=metadata))

        context.log.info("starting stream %s on topic %s with state under %s", spec.name, spec.input_topic, spec.root)
        # The supervisor takes this run for dead when the beats stop (see orchestration.streams.supervisor).
        heartbeat = HeartbeatWriter(spec.control_dir).start()
        try:
            service.run(config.observe_every_s, observe, max_runtime_s=config.max_runtime_s)
        finally:
            heartbeat.stop()
        last = observations[-1].as_metadata() if observations else {}
        return MaterializeResult(metadata={"observations": len(observations), **last})

    return stream_asset
