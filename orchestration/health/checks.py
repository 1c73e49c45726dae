"""The health checks on each `<stream>_stream` asset, visible on its Checks tab:

- `slo`: p99 probe latency of the recent observations vs the stream's effective SLO (the
  policy the elasticity sensor uses, override file included);
- `dead_letter_rate`: dead letters / input records over a recent window (Kafka offsets by time);
- `freshness_check`: Dagster's own last-update freshness check; an observation older than the
  limit makes the stream stale (its run observes every few seconds while it lives).
"""

import datetime as dt
import time
import warnings
from collections.abc import Sequence

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    Config,
    DefaultSensorStatus,
    SensorDefinition,
    SupersessionWarning,
    asset_check,
    build_last_update_freshness_checks,
    build_sensor_for_freshness_checks,
)
from pydantic import Field

from orchestration.elasticity.policy import ElasticityPolicy, PolicyFileError, load_policy
from orchestration.health.samples import Verdict, evaluate_dead_letter_rate, evaluate_slo, recent_samples
from orchestration.names import DEAD_LETTER_RATE_CHECK, FRESHNESS_SENSOR, STREAM_SLO_CHECK, stream_asset_key
from orchestration.resources import EspSettingsResource, KafkaResource
from orchestration.streams.catalog import StreamEntry, stream_spec

DEFAULT_STALE_AFTER_S = 120
"""A stream observes every 5 s by default: two minutes without one means it is down or stuck."""


class SloCheckConfig(Config):
    """The window the SLO is judged over."""

    window_s: float = Field(300.0, gt=0, description="Look-back window over the stream's observations.")
    max_breach_share: float = Field(
        0.1, ge=0, le=1, description="Share of observations allowed above the SLO (a rescale's pause is a breach)."
    )


class DeadLetterRateConfig(Config):
    """The dead-letter rate still acceptable."""

    window_s: float = Field(900.0, gt=0, description="Look-back window (Kafka record time).")
    max_rate: float = Field(0.01, ge=0, le=1, description="Dead letters per input record allowed.")
    min_input: int = Field(100, ge=0, description="Below this many input records the rate is not judged.")


def _result(verdict: Verdict, extra: dict[str, object]) -> AssetCheckResult:
    return AssetCheckResult(
        passed=verdict.passed,
        severity=AssetCheckSeverity.WARN,
        description=verdict.description,
        metadata={**verdict.numbers, **extra},
    )


def make_slo_check(entry: StreamEntry, default: ElasticityPolicy) -> AssetChecksDefinition:
    key = stream_asset_key(entry.name)

    @asset_check(
        asset=key,
        name=STREAM_SLO_CHECK,
        description="p99 probe latency of the recent observations vs the stream's SLO (its effective policy).",
    )
    def slo(
        context: AssetCheckExecutionContext, config: SloCheckConfig, esp_settings: EspSettingsResource
    ) -> AssetCheckResult:
        control_dir = stream_spec(esp_settings.load(), entry).control_dir
        try:
            policy = load_policy(control_dir, default)
        except PolicyFileError as error:
            return AssetCheckResult(passed=False, severity=AssetCheckSeverity.WARN, description=str(error))
        samples = recent_samples(context.instance, key, config.window_s, time.time())
        return _result(
            evaluate_slo(samples, policy.slo_s * 1000, config.max_breach_share), {"window_s": config.window_s}
        )

    return slo


def make_dead_letter_rate_check(entry: StreamEntry) -> AssetChecksDefinition:
    @asset_check(
        asset=stream_asset_key(entry.name),
        name=DEAD_LETTER_RATE_CHECK,
        description="Dead letters per input record over a recent window vs a threshold.",
    )
    def dead_letter_rate(
        config: DeadLetterRateConfig, esp_settings: EspSettingsResource, kafka: KafkaResource
    ) -> AssetCheckResult:
        from orchestration.quality.dead_letters import read_dead_letters

        spec = stream_spec(esp_settings.load(), entry)
        since_ms = int((time.time() - config.window_s) * 1000)
        connection = kafka.connection()
        # cap=0: only the exact count from offsets by time, no records read.
        dead = read_dead_letters(connection, spec.dead_letter_topic, since_ms, cap=0).volume
        records = read_dead_letters(connection, spec.input_topic, since_ms, cap=0).volume
        verdict = evaluate_dead_letter_rate(dead, records, config.max_rate, config.min_input)
        return _result(verdict, {"window_s": config.window_s, "max_rate": config.max_rate})

    return dead_letter_rate


def freshness_checks(entries: Sequence[StreamEntry], stale_after_s: int) -> Sequence[AssetChecksDefinition]:
    """Dagster's last-update freshness check on each stream asset (observations count when they
    carry `dagster/last_updated_timestamp`, which the stream run's observations do)."""
    # Superseded by FreshnessPolicy in Dagster 1.13, but that one looks at materializations only,
    # and a stream materializes once, when its run ends: its liveness is in its observations.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SupersessionWarning)
        return build_last_update_freshness_checks(
            assets=[stream_asset_key(entry.name) for entry in entries],
            lower_bound_delta=dt.timedelta(seconds=stale_after_s),
        )


def freshness_sensor(checks: Sequence[AssetChecksDefinition], interval_s: int) -> SensorDefinition:
    """Dagster's sensor that runs the freshness checks when one may have turned stale."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SupersessionWarning)
        return build_sensor_for_freshness_checks(
            freshness_checks=checks,
            name=FRESHNESS_SENSOR,
            minimum_interval_seconds=interval_s,
            default_status=DefaultSensorStatus.RUNNING,
        )
