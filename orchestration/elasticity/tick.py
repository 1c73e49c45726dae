"""One evaluation of the elastic loop for a real stream: collect -> evaluate -> decide -> realize, explained.

`decide_tick(cursor, reading, policy, hand_on)` is what the Dagster sensor runs at every tick, and
the real-stack benchmark's driver too: it restores the loop's state from the cursor and runs one
`ElasticLoop.tick()` (the loop the simulation runs) with this module's collector (`ReadingCollector`:
the reading -> a snapshot) and realizer (`TargetRealizer`: the decision -> a target in layout
channel ids, handed on to `hand_on`). The sensor's `hand_on` does nothing (the sensor yields the
run request of the returned outcome), the benchmark's rescales online. If `hand_on` raises, the
loop keeps its state (no cooldown after a rescale that did not happen) and the error propagates.

The tick returns the new cursor together with either a rescale (decision + target) or a sentence
saying why not. The cursor is JSON: the `LoopState` (detector windows + controller state) and the
previous tick's Kafka offsets; a few KB for a handful of channels.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from elasticity.control import Decision, ElasticLoop, LoopState, ManualClock, MetricsSnapshot
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
    awaited = snapshot.awaited
    if awaited is not None and decision.rule not in ("awaiting", "in_flight"):
        return f"waiting for the first batch of layout epoch {awaited.epoch}: {decision.reason}; {numbers}"
    if awaited is not None:
        return f"{decision.reason}; {numbers}"
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


HandOn = Callable[[Decision, RescaleTarget], None]
"""What carries out a rescale: request a run (the sensor) or rescale online (the benchmark)."""


class ReadingCollector:
    """The loop's collector for a real stream: the tick's reading and the previous tick's offsets
    -> one snapshot (`collect`); keeps the `Collected` for the realizer and the explanation."""

    def __init__(self, reading: StreamReading, previous: OffsetSample | None, policy: ElasticityPolicy) -> None:
        self.reading, self.previous, self.policy = reading, previous, policy
        self.collected: Collected | None = None

    def collect(self, now_s: float) -> MetricsSnapshot:
        self.collected = collect(self.reading, self.previous, self.policy)  # NotReady: nothing to decide on
        return self.collected.snapshot


class TargetRealizer:
    """The loop's realizer for a real stream: a decision -> its target in layout channel ids (the
    controller counts channels 0..N-1, the layout may have gaps), cited with the SLO, handed on."""

    def __init__(self, collector: ReadingCollector, policy: ElasticityPolicy, hand_on: HandOn) -> None:
        self.collector, self.policy, self.hand_on = collector, policy, hand_on
        self.realized: tuple[Decision, RescaleTarget] | None = None

    def apply(self, decision: Decision) -> None:
        assert self.collector.collected is not None  # the loop collects before it realizes
        target = target_for(decision, self.collector.collected.channels)
        cited = decision.model_copy(update={"reason": f"{decision.reason} ({slo_text(self.policy)})"})
        self.hand_on(cited, target)
        self.realized = (cited, target)


def _nothing(decision: Decision, target: RescaleTarget) -> None:
    """The sensor's hand-on: the run request is yielded from the outcome."""


def _decide(cursor_text: str | None, reading: StreamReading, policy: ElasticityPolicy, hand_on: HandOn) -> TickOutcome:
    cursor = SensorCursor.from_json(cursor_text, policy)
    collector = ReadingCollector(reading, cursor.offsets, policy)
    if not policy.auto_rescale:
        return _held(cursor, cursor_text, collector, policy)
    realizer = TargetRealizer(collector, policy, hand_on)
    loop = ElasticLoop(policy.control_options(), collector, realizer, ManualClock(reading.now_s), state=cursor.loop)
    try:
        decision = loop.tick()
    except NotReady as not_ready:
        return TickOutcome(cursor=cursor_text or "", skip_reason=str(not_ready))
    collected = collector.collected
    assert collected is not None
    new_cursor = SensorCursor(loop.state, collected.offsets).to_json()
    if realizer.realized is None:
        reason = explain(decision, collected, policy, reading.now_s, loop.state.controller.cooldown_until_s)
        return TickOutcome(cursor=new_cursor, decision=decision, collected=collected, skip_reason=reason)
    cited, target = realizer.realized
    return TickOutcome(cursor=new_cursor, decision=cited, target=target, collected=collected)


def _held(
    cursor: SensorCursor, cursor_text: str | None, collector: ReadingCollector, policy: ElasticityPolicy
) -> TickOutcome:
    """Automatic rescaling is off: the offsets move on, the loop's windows stay as they were
    (nothing is decided while a person steers by hand)."""
    try:
        collector.collect(collector.reading.now_s)
    except NotReady as not_ready:
        return TickOutcome(cursor=cursor_text or "", skip_reason=str(not_ready))
    collected = collector.collected
    assert collected is not None
    held = SensorCursor(cursor.loop, collected.offsets).to_json()
    reason = f"automatic rescaling is off in the policy; {tick_numbers(collected, policy)}"
    return TickOutcome(cursor=held, collected=collected, skip_reason=reason)


def decide_tick(
    cursor_text: str | None, reading: StreamReading, policy: ElasticityPolicy, hand_on: HandOn = _nothing
) -> TickOutcome:
    """One collect -> evaluate -> decide -> realize step for a stream (pure apart from the reading
    and `hand_on`); the reason of a skip ends with how many malformed metrics records were left out."""
    outcome = _decide(cursor_text, reading, policy, hand_on)
    note = reading.skipped_note()
    if note is None:
        return outcome
    reason = outcome.skip_reason and f"{outcome.skip_reason}; {note}"
    return replace(outcome, skip_reason=reason, skipped_metrics=reading.skipped_metrics)


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
