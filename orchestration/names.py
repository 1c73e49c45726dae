"""Every name esp gives a Dagster object, in one place: asset keys, jobs, sensors, schedules,
asset checks, asset groups and run-tag keys.

The definitions, the code that looks runs and events up by these names, the benchmarks and the
tests all use these; nothing else spells them. A per-stream name takes the stream's name (a
`StreamEntry.name`, which is also its `BatchPipeline.name`). Kafka topic names and a stream's
folder layout are the pipelines' own: `pipelines.streams.names`.

The tag key `RESCALE_TAG` is also the key of the instance's tag concurrency limit in
`infra/dagster.yaml` (one rescale run per stream at a time); the two must stay equal.
"""

from __future__ import annotations

from dagster import AssetCheckSpec, AssetKey

from pipelines.streams.names import FIRST_STAGE

CODE_LOCATION = "esp"
"""The code location's name (`location_name` in workspace.yaml; the two must stay equal)."""

# -- asset keys -----------------------------------------------------------------------------------

TOPIC_INVENTORY_ASSET_KEY = AssetKey("kafka_topic_inventory")
"""The broker's topics and their partition counts (platform)."""


def stream_asset_key(stream: str) -> AssetKey:
    """The long-running stream (a run of it owns the streaming query)."""
    return AssetKey(f"{stream}_stream")


def layout_asset_key(stream: str, stage: str = FIRST_STAGE) -> AssetKey:
    """The resizing asset: the partition layout of one elastic stage of the stream (a multi-stage
    job's later stages have their own: `<stream>_<stage>_layout`)."""
    return AssetKey(f"{stream}_layout" if stage == FIRST_STAGE else f"{stream}_{stage}_layout")


def results_asset_key(stream: str) -> AssetKey:
    """The stream's results table (Parquet)."""
    return AssetKey(f"{stream}_results")


def bronze_asset_key(stream: str) -> AssetKey:
    """The stream's archive of its input (Parquet)."""
    return AssetKey(f"{stream}_bronze")


def dead_letters_asset_key(stream: str) -> AssetKey:
    """The stream's dead-letter topic."""
    return AssetKey(f"{stream}_dead_letters")


def daily_counts_asset_key(stream: str) -> AssetKey:
    """The daily-partitioned batch recomputation from the bronze archive."""
    return AssetKey(f"{stream}_daily_counts")


def policy_asset_key(stream: str) -> AssetKey:
    """The stream's elasticity policy; each change made from the UI is a materialization."""
    return AssetKey(f"{stream}_elasticity_policy")


def dashboard_asset_key(stream: str) -> AssetKey:
    """The stream's last hour as a PNG (rates, lag, p99, channels, rescale markers)."""
    return AssetKey(f"{stream}_dashboard")


ALERTS_ASSET_KEY = AssetKey("stream_alerts")
"""One materialization per alert (a failed stream or resize run)."""


def op_name(key: AssetKey) -> str:
    """The name of the op that computes the asset (the `ops` key of a run config), as Dagster derives it."""
    return key.to_python_identifier()


# -- jobs -----------------------------------------------------------------------------------------


def stream_job_name(stream: str) -> str:
    """The job whose run is the stream."""
    return f"{stream}_stream_job"


def resize_job_name(stream: str, stage: str = FIRST_STAGE) -> str:
    """The job whose run rescales one elastic stage of the stream (materializes its layout asset)."""
    return f"{stream}_resize_job" if stage == FIRST_STAGE else f"{stream}_{stage}_resize_job"


def rescale_tag_value(stream: str, stage: str = FIRST_STAGE) -> str:
    """The `RESCALE_TAG` value of a stage's rescale runs: one run per stage at a time."""
    return stream if stage == FIRST_STAGE else f"{stream}.{stage}"


def stop_job_name(stream: str) -> str:
    """The job whose run stops the stream (holds its supervisor, terminates its run)."""
    return f"{stream}_stop_job"


def policy_job_name(stream: str) -> str:
    """The job whose run changes the stream's elasticity policy (materializes its policy asset)."""
    return f"{stream}_set_policy_job"


VALIDATION_JOB = "validation_job"
HEALTH_JOB = "stream_health_job"
"""Renders every stream's dashboard and runs the SLO and dead-letter rate checks."""
DAILY_RECOMPUTE_JOB = "daily_recompute_job"
LOAD_GENERATOR_JOB = "load_generator_job"
RUN_RETENTION_JOB = "run_retention_job"

# -- sensors and schedules ------------------------------------------------------------------------


def elasticity_sensor_name(stream: str) -> str:
    """The elastic control loop of the stream."""
    return f"{stream}_elasticity"


def supervisor_sensor_name(stream: str) -> str:
    """The sensor that keeps the stream's run alive."""
    return f"{stream}_supervisor"


RUN_FAILURE_SENSOR = "stream_run_failure_alerts"
"""Alerts on a failed stream or resize run."""
FRESHNESS_SENSOR = "stream_freshness_sensor"
"""Runs the streams' freshness checks (Dagster's own)."""
HEALTH_SCHEDULE = "stream_health_schedule"
VALIDATION_SCHEDULE = "validation_schedule"
NIGHTLY_BACKFILL_SCHEDULE = "nightly_backfill_schedule"
RUN_RETENTION_SCHEDULE = "run_retention_schedule"

# -- asset checks (names within their asset) and the GX suites they validate ----------------------

RESULTS_SUITE_CHECK = "results_suite"
RECONCILIATION_CHECK = "reconciliation"
DEAD_LETTER_VOLUME_CHECK = "dead_letter_volume"
STATE_AFTER_RESCALE_CHECK = "state_after_rescale"
STREAM_SLO_CHECK = "slo"
"""On `<stream>_stream`: p99 probe latency over the recent observations vs the policy's SLO."""
DEAD_LETTER_RATE_CHECK = "dead_letter_rate"
"""On `<stream>_stream`: dead letters / input records over a recent window vs a threshold."""
FRESHNESS_CHECK = "freshness_check"
"""On `<stream>_stream`: Dagster's last-update freshness check (the name Dagster gives it)."""


def check_op_name(key: AssetKey, check: str) -> str:
    """The name of the op that runs the asset check (the `ops` key of a run config), as Dagster derives it."""
    return AssetCheckSpec(check, asset=key).get_python_identifier()


def results_suite_name(stream: str) -> str:
    return f"{stream}_results"


def dead_letters_suite_name(stream: str) -> str:
    return f"{stream}_dead_letters"


def state_suite_name(stream: str) -> str:
    return f"{stream}_state_after_rescale"


# -- asset groups ---------------------------------------------------------------------------------

STREAMS_GROUP = "streams"
ELASTICITY_GROUP = "elasticity"
TABLES_GROUP = "tables"
BACKFILLS_GROUP = "backfills"
PLATFORM_GROUP = "platform"
HEALTH_GROUP = "health"

# -- run and op tag keys --------------------------------------------------------------------------

STREAM_TAG = "esp/stream"
"""The stream a run (or op) runs; value: the stream's name."""
RESTART_REASON_TAG = "esp/restart-reason"
"""Why the supervisor started the stream's run."""
RESCALE_TAG = "esp/rescale"
"""The stream a run rescales; the instance's concurrency limit allows one run per value."""
RESCALE_RULE_TAG = "esp/rescale-rule"
RESCALE_ACTION_TAG = "esp/rescale-action"
RESCALE_TARGET_TAG = "esp/rescale-target"
RESCALE_REASON_TAG = "esp/rescale-reason"
MAX_RUNTIME_TAG = "dagster/max_runtime"
"""Dagster's own: run monitoring fails a run still going after this many seconds (also one whose
process died, which nothing else would notice with the default run launcher)."""
RESIZE_MAX_RUNTIME_S = 480
"""A resize run's limit: its wait for the stream (at most RESIZE_MAX_WAIT_S) plus planning and plots."""
RESIZE_MAX_WAIT_S = 400.0
PIPELINE_TAG = "esp/pipeline"
"""The batch pipeline an op or run recomputes."""
BACKFILL_TAG = "esp/backfill"
"""Who asked for a backfill run: `scheduled` or `cli`."""
VALIDATION_TAG = "esp/validation"
KIND_TAG = "esp/kind"
