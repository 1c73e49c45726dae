"""The elasticity sensor `<stream>_elasticity`: the control loop's tick, with its state in the cursor.

Each evaluation reads the stream's recent metrics and Kafka offsets, runs the detectors and the
controller (`tick.decide_tick`), and either requests a run of `<stream>_resize_job` (target as
run config; rule, action, target and reason as tags, plus `esp/rescale: <stream>`, which the
instance's tag concurrency limit keeps to one run per stream) or skips with the reason.

Never two rescales of one stream at a time: besides the concurrency limit, the sensor skips
while a rescale run of the stream is queued or running, while a request waits in the stream's
control folder, or while a migration is pending in its layout registry.
"""

import time
from collections.abc import Callable

from dagster import (
    DagsterInstance,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from orchestration.elasticity.decisions import DecisionRecord, write_decision
from orchestration.elasticity.policy import ElasticityPolicy, PolicyFileError, load_policy
from orchestration.names import RESCALE_TAG, elasticity_sensor_name, layout_asset_key, op_name, rescale_tag_value
from orchestration.resources import EspSettingsResource
from orchestration.runs import ACTIVE_RUN_STATUSES
from orchestration.streams.catalog import StreamEntry, stream_spec
from pipelines.streams.names import FIRST_STAGE

DEFAULT_INTERVAL_S = 10


def rescale_in_flight(instance: DagsterInstance, stream: str, spec, stage: str = FIRST_STAGE) -> str | None:
    """Why a new rescale of the stream's elastic stage `stage` must wait, or None if none is under way."""
    from orchestration.elasticity.realizer import describe_target
    from pipelines.streams.files import StreamFiles

    tag = rescale_tag_value(stream, stage)
    runs = instance.get_runs(filters=RunsFilter(tags={RESCALE_TAG: tag}, statuses=ACTIVE_RUN_STATUSES), limit=1)
    if runs:
        return f"rescale run {runs[0].run_id[:8]} of {tag} is {runs[0].status.value}; one rescale at a time"
    files = StreamFiles(spec, stage)
    if stage != FIRST_STAGE:
        stream = f"{stream} (stage {stage})"
    if (request := files.pending_request()) is not None:
        return (
            f"request {request.request_id} ({describe_target(request.target)}) waits for {stream}'s next batch boundary"
        )
    if (epoch := files.pending_migration()) is not None:
        return f"a migration of {stream} to layout epoch {epoch} is in progress (or awaits recovery)"
    return None


def rescale_run_config(entry: StreamEntry, outcome, policy: ElasticityPolicy) -> dict:
    target = outcome.target
    return {
        "ops": {
            op_name(layout_asset_key(entry.name)): {
                "config": {
                    "target": {"op": target.op, "channels": target.channels, "channel": target.channel},
                    "reason": outcome.decision.reason,
                    "rule": outcome.decision.rule,
                    "timeout_s": policy.rescale_timeout_s,
                }
            }
        }
    }


def make_elasticity_sensor(
    entry: StreamEntry,
    job_name: str,
    interval_s: int = DEFAULT_INTERVAL_S,
    policy: ElasticityPolicy | None = None,
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
    source: Callable[..., object] | None = None,
) -> SensorDefinition:
    """The sensor of one stream; `policy` is the default (a stream's override file wins).

    `source(spec, policy)` returns the stream's `StreamSource`; default the real Kafka one
    (unit tests pass a fake that replays scripted metrics).
    """
    default_policy = policy or ElasticityPolicy(sample_period_s=float(interval_s))

    @sensor(
        name=elasticity_sensor_name(entry.name),
        job_name=job_name,
        minimum_interval_seconds=interval_s,
        default_status=default_status,
        description=f"Elastic control loop of the {entry.name} stream: eSault detectors + SASO controller on its "
        "metrics; requests a rescale run or says why not.",
    )
    def elasticity(context: SensorEvaluationContext, esp_settings: EspSettingsResource):
        from kafka.errors import KafkaError

        from orchestration.elasticity.collector import KafkaStreamSource
        from orchestration.elasticity.tick import decide_tick, run_tags

        spec = stream_spec(esp_settings.load(), entry)

        def skip(reason: str, cursor: str | None, rule: str = "") -> SensorResult:
            write_decision(spec.control_dir, DecisionRecord(at=time.time(), rescale=False, rule=rule, reason=reason))
            return SensorResult(skip_reason=SkipReason(reason), cursor=cursor)

        try:
            stream_policy = load_policy(spec.control_dir, default_policy)
        except PolicyFileError as error:
            # No decision on a policy nobody chose; the stream runs on, on its committed layout.
            context.log.error(str(error))
            return skip(str(error), context.cursor)
        waiting = rescale_in_flight(context.instance, entry.name, spec)
        if waiting is not None:
            return skip(waiting, context.cursor)
        make_source = source or (lambda spec, policy: KafkaStreamSource.of_policy(spec, policy))
        try:
            reading = make_source(spec, stream_policy).read(time.time())
        except (KafkaError, OSError) as error:
            return skip(f"cannot read {entry.name}'s metrics: {error}", context.cursor)
        outcome = decide_tick(context.cursor, reading, stream_policy)
        if (note := reading.skipped_note()) is not None:
            context.log.warning("%s: %s", entry.name, note)
        if not outcome.is_rescale:
            rule = outcome.decision.rule if outcome.decision is not None else ""
            return skip(outcome.skip_reason or "", outcome.cursor, rule)
        context.log.info("%s: %s", entry.name, outcome.decision.reason)
        write_decision(
            spec.control_dir,
            DecisionRecord(at=time.time(), rescale=True, rule=outcome.decision.rule, reason=outcome.decision.reason),
        )
        request = RunRequest(
            run_key=f"{entry.name}-e{outcome.collected.epoch}-{int(outcome.decision.time_s)}",
            run_config=rescale_run_config(entry, outcome, stream_policy),
            tags=run_tags(entry.name, outcome),
        )
        return SensorResult(run_requests=[request], cursor=outcome.cursor)

    return elasticity
