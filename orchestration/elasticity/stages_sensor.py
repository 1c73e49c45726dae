"""The elasticity sensor of a stream whose job has several elastic stages: one `StagesLoop` tick
per evaluation (`stage_tick.decide_stages_tick`), its state in the cursor, and a run of each
decided stage's own resize job (`<stream>_<stage>_resize_job`, tagged with the stage's rescale tag,
so the instance's tag concurrency limit keeps one run per stage).

It skips, with the reason, while any stage has a rescale queued or running, a request waiting in
its control folder or a migration pending: the stages of one micro-batch share its time, so what
was measured while one of them changes says little about the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from orchestration.elasticity.decisions import DecisionRecord, write_decision
from orchestration.elasticity.policy import ElasticityPolicy, PolicyFileError, load_policy
from orchestration.elasticity.sensor import rescale_in_flight
from orchestration.names import (
    RESCALE_ACTION_TAG,
    RESCALE_REASON_TAG,
    RESCALE_RULE_TAG,
    RESCALE_TAG,
    RESCALE_TARGET_TAG,
    elasticity_sensor_name,
    layout_asset_key,
    op_name,
    rescale_tag_value,
    resize_job_name,
)
from orchestration.resources import EspSettingsResource
from orchestration.streams.catalog import StreamEntry, stream_spec
from pipelines.streams.names import stage_paths

StageReader = Callable[..., list]
"""(spec, stage, limit) -> the stage's recent `BatchMetrics` (default: its metrics topic on Kafka)."""


def _read_stage(spec, stage: str, limit: int) -> list:
    from pipelines.streams.metrics import read_recent
    from pipelines.streams.names import stage_metrics_topic

    return read_recent(spec.kafka, stage_metrics_topic(spec.name, stage), limit=limit)


def stage_run_request(entry: StreamEntry, rescale, policy: ElasticityPolicy, now_s: float) -> RunRequest:
    """The run of `rescale.stage`'s resize job that applies the rescale (online, as a person's would)."""
    from orchestration.elasticity.realizer import describe_target

    target = rescale.target
    config = {
        "target": {"op": target.op, "channels": target.channels, "channel": target.channel},
        "reason": rescale.decision_reason,
        "rule": rescale.rule,
        "timeout_s": policy.rescale_timeout_s,
    }
    return RunRequest(
        run_key=f"{entry.name}-{rescale.stage}-{rescale.from_channels}-{rescale.to_channels}-{int(now_s)}",
        job_name=resize_job_name(entry.name, rescale.stage),
        run_config={"ops": {op_name(layout_asset_key(entry.name, rescale.stage)): {"config": config}}},
        tags={
            RESCALE_TAG: rescale_tag_value(entry.name, rescale.stage),
            RESCALE_RULE_TAG: rescale.rule,
            RESCALE_ACTION_TAG: "scale_out" if rescale.to_channels > rescale.from_channels else "scale_in",
            RESCALE_TARGET_TAG: describe_target(target),
            RESCALE_REASON_TAG: rescale.decision_reason[:4000],
        },
    )


def make_stages_sensor(
    entry: StreamEntry,
    stages: Sequence[str],
    jobs: Sequence,
    interval_s: int,
    policy: ElasticityPolicy,
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
    source: Callable[..., object] | None = None,
    stage_reader: StageReader | None = None,
) -> SensorDefinition:
    """The sensor of a multi-stage stream; `jobs` are its stages' resize jobs, `source` and
    `stage_reader` replace the Kafka readers (unit tests)."""
    later = tuple(stages[1:])
    read_stage = stage_reader or _read_stage

    @sensor(
        name=elasticity_sensor_name(entry.name),
        jobs=list(jobs),
        minimum_interval_seconds=interval_s,
        default_status=default_status,
        description=f"Elastic control loop of the {entry.name} stream's {len(stages)} stages: As-Stream's "
        "bottleneck ranking and prediction (or the policy's choice) per stage; requests each stage's resize run "
        "or says why not.",
    )
    def elasticity(context: SensorEvaluationContext, esp_settings: EspSettingsResource):
        from kafka.errors import KafkaError

        from orchestration.elasticity.collector import KafkaStreamSource
        from orchestration.elasticity.stage_tick import committed_epochs, decide_stages_tick, held_cursor

        spec = stream_spec(esp_settings.load(), entry)

        def skip(reason: str, cursor: str | None) -> SensorResult:
            write_decision(spec.control_dir, DecisionRecord(at=time.time(), rescale=False, rule="", reason=reason))
            return SensorResult(skip_reason=SkipReason(reason), cursor=cursor)

        try:
            stream_policy = load_policy(spec.control_dir, policy)
        except PolicyFileError as error:
            context.log.error(str(error))
            return skip(str(error), context.cursor)
        for stage in stages:
            if (waiting := rescale_in_flight(context.instance, entry.name, spec, stage)) is not None:
                return skip(waiting, context.cursor)
        make_source = source or (
            lambda spec, policy: KafkaStreamSource(spec, policy.metrics_limit, policy.stage_options().arrival_window_s)
        )
        now_s = time.time()
        try:
            reading = make_source(spec, stream_policy).read(now_s)
            metrics = {stage: read_stage(spec, stage, stream_policy.metrics_limit) for stage in later}
        except (KafkaError, OSError) as error:
            return skip(f"cannot read {entry.name}'s metrics: {error}", context.cursor)
        outcome = decide_stages_tick(
            context.cursor,
            reading,
            metrics,
            stream_policy,
            stream_policy.stage_options(),
            lambda rescales: None,
            committed_epochs(spec, later),
        )
        if not stream_policy.auto_rescale and outcome.rescales:
            assert outcome.collected is not None  # a tick that decided has collected
            held = held_cursor(context.cursor, outcome.collected)
            return skip(f"automatic rescaling is off in the policy; it would rescale {_what(outcome)}", held)
        if not outcome.rescales:
            return skip(outcome.skip_reason or "", outcome.cursor)
        for rescale in outcome.rescales:
            context.log.info("%s stage %s: %s", entry.name, rescale.stage, rescale.decision_reason)
            # Each stage's history beside its own layout and requests (its control folder).
            write_decision(
                stage_paths(spec.folder, rescale.stage).control,
                DecisionRecord(at=time.time(), rescale=True, rule=rescale.rule, reason=rescale.decision_reason),
            )
        # The stream's last decision (what `esp status` shows): every stage this tick rescales.
        rules = "+".join(sorted({r.rule for r in outcome.rescales}))
        said = "; ".join(f"stage {r.stage}: {r.decision_reason}" for r in outcome.rescales)
        write_decision(spec.control_dir, DecisionRecord(at=time.time(), rescale=True, rule=rules, reason=said))
        requests = [stage_run_request(entry, rescale, stream_policy, now_s) for rescale in outcome.rescales]
        return SensorResult(run_requests=requests, cursor=outcome.cursor)

    return elasticity


def _what(outcome) -> str:
    return ", ".join(f"stage {r.stage} {r.from_channels} -> {r.to_channels}" for r in outcome.rescales)
