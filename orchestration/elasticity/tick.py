"""One evaluation of the elastic loop for a real stream: collect -> evaluate -> decide, explained.

`decide_tick(cursor, reading, policy)` is what the Dagster sensor runs at every tick (and the
benchmark's driver, with the same code): it restores the loop's state from the cursor, turns
the reading into a snapshot, runs `control_step`, and returns the new cursor together with
either a rescale (decision + target in layout channel ids) or a sentence saying why not.
The cursor is JSON: the `LoopState` (detector windows + controller state) and the previous
tick's Kafka offsets; a few KB for a handful of channels.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace

from elasticity.control import Decision, LoopState, control_step
from orchestration.elasticity.collector import Collected, NotReady, OffsetSample, StreamReading, collect
from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.elasticity.realizer import describe_target, target_for
from orchestration.names import (
    RESCALE_ACTION_TAG,
    RESCALE_REASON_TAG,
    RESCALE_RULE_TAG,
    RESCALE_TAG,
    RESCALE_TARGET_TAG,
)
from pipelines.streams.control import RescaleTarget


@dataclass(frozen=True)
class SensorCursor:
    """All the sensor remembers between ticks."""

    loop: LoopState
    offsets: OffsetSample | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "loop": json.loads(self.loop.to_json()),
                "offsets": None if self.offsets is None else self.offsets.to_dict(),
            }
        )

    @classmethod
    def from_json(cls, text: str | None, policy: ElasticityPolicy) -> SensorCursor:
        if not text:
            return cls(LoopState())
        data = json.loads(text)
        offsets = data.get("offsets")
        return cls(
            LoopState.from_json(json.dumps(data["loop"]), policy.control_options()),
            None if offsets is None else OffsetSample.from_dict(offsets),
        )


@dataclass(frozen=True)
class TickOutcome:
    """The result of one tick: the cursor to keep, and a rescale or the reason for none."""

    cursor: str
    decision: Decision | None = None
    target: RescaleTarget | None = None
    collected: Collected | None = None
    skip_reason: str | None = None
    skipped_metrics: int = 0
    """Malformed records on the metrics topic this tick left out (the reason names the first)."""

    @property
    def is_rescale(self) -> bool:
        return self.target is not None


def slo_text(policy: ElasticityPolicy) -> str:
    """How every reason cites the SLO it was decided under (a changed policy shows at the next tick)."""
    return f"SLO {policy.slo_s * 1000:,.0f} ms"


def tick_numbers(collected: Collected, policy: ElasticityPolicy) -> str:
    """The numbers a person checks a decision against, the SLO among them."""
    snapshot = collected.snapshot
    return (
        f"p99 {collected.p99_latency_s * 1000:,.0f} ms ({slo_text(policy)}), "
        f"lag {snapshot.total_lag_records:,.0f} records, in {snapshot.input_rate_rps:,.0f} rec/s, "
        f"out {snapshot.total_throughput_rps:,.0f} rec/s"
    )


def explain(
    decision: Decision, collected: Collected, policy: ElasticityPolicy, now_s: float, cooldown_until: float | None
) -> str:
    """The SkipReason of a tick without rescale: the rule's view plus the numbers a person checks."""
    snapshot = collected.snapshot
    numbers = tick_numbers(collected, policy)
    if decision.rule == "cooldown" and cooldown_until is not None:
        until = time.strftime("%H:%M:%S", time.localtime(cooldown_until))
        return f"cooling down until {until} ({cooldown_until - now_s:.0f} s) after a rescale; {numbers}"
    if decision.rule == "warmup":
        return (
            f"warming up at {snapshot.channels} channels (layout epoch {collected.epoch}): {decision.reason}; {numbers}"
        )
    if decision.rule == "P2" or (decision.rule == "bounds" and "not congested" in decision.reason):
        return f"stable at {snapshot.channels} channels: {numbers} ({decision.rule}: {decision.reason})"
    return f"no rescale at {snapshot.channels} channels ({decision.rule}): {decision.reason}; {numbers}"


def decide_tick(cursor_text: str | None, reading: StreamReading, policy: ElasticityPolicy) -> TickOutcome:
    """One collect -> evaluate -> decide step for a stream (pure apart from the reading); the reason
    of a skip ends with how many malformed metrics records were left out, if any."""
    outcome = _decide(cursor_text, reading, policy)
    note = reading.skipped_note()
    if note is None:
        return outcome
    reason = outcome.skip_reason and f"{outcome.skip_reason}; {note}"
    return replace(outcome, skip_reason=reason, skipped_metrics=reading.skipped_metrics)


def _decide(cursor_text: str | None, reading: StreamReading, policy: ElasticityPolicy) -> TickOutcome:
    cursor = SensorCursor.from_json(cursor_text, policy)
    try:
        collected = collect(reading, cursor.offsets, policy)
    except NotReady as not_ready:
        return TickOutcome(cursor=cursor_text or "", skip_reason=str(not_ready))
    if not policy.auto_rescale:
        # The loop's windows stay as they were: nothing is decided while a person steers by hand.
        held = SensorCursor(cursor.loop, collected.offsets).to_json()
        reason = f"automatic rescaling is off in the policy; {tick_numbers(collected, policy)}"
        return TickOutcome(cursor=held, collected=collected, skip_reason=reason)
    state, _evaluation, decision = control_step(
        policy.control_options(), cursor.loop, collected.snapshot, reading.now_s
    )
    new_cursor = SensorCursor(state, collected.offsets).to_json()
    if not decision.is_rescale:
        reason = explain(decision, collected, policy, reading.now_s, state.controller.cooldown_until_s)
        return TickOutcome(cursor=new_cursor, decision=decision, collected=collected, skip_reason=reason)
    target = target_for(decision, collected.channels)
    decision = decision.model_copy(update={"reason": f"{decision.reason} ({slo_text(policy)})"})
    return TickOutcome(cursor=new_cursor, decision=decision, target=target, collected=collected)


def run_tags(stream: str, outcome: TickOutcome) -> dict[str, str]:
    """Tags of a rescale run: the concurrency key, the rule, and the reason (Dagster caps tag values)."""
    assert outcome.decision is not None and outcome.target is not None
    return {
        RESCALE_TAG: stream,
        RESCALE_RULE_TAG: outcome.decision.rule,
        RESCALE_ACTION_TAG: outcome.decision.action,
        RESCALE_TARGET_TAG: describe_target(outcome.target),
        RESCALE_REASON_TAG: outcome.decision.reason[:4000],
    }
