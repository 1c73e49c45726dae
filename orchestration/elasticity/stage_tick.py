"""One evaluation of a multi-stage job's elastic loop: `elasticity.control.asstream.StagesLoop`,
restored from a cursor, with a real collector and a realizer that hands targets on.

`decide_stages_tick(cursor, reading, later, policy, stages, hand_on)` is the counterpart of
`tick.decide_tick` for a job with several elastic stages: the stream's reading (first stage's
metrics, Kafka offsets) gives the job-level snapshot through the same `collect`, each stage's
own metrics topic gives its batches (`JobReadingCollector`), and the loop's decisions become one
`RescaleTarget` per stage, handed on together (`StageTargetsRealizer`): the benchmark rescales
the stages online, a sensor would request each stage's resize run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from elasticity.control import ManualClock
from elasticity.control.asstream import (
    JobSnapshot,
    StageDecision,
    StagesLoop,
    StagesLoopState,
    StagesOptions,
    StageView,
    stage_batches,
)
from orchestration.elasticity.collector import (
    Collected,
    NotReady,
    OffsetSample,
    StreamReading,
    collect,
    waiting_for_layout,
)
from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.elasticity.realizer import target_for
from orchestration.elasticity.stage_monitoring import own_seconds
from pipelines.streams.control import RescaleTarget
from pipelines.streams.metrics import BatchMetrics
from pipelines.streams.names import FIRST_STAGE


def stage_view(stage: str, records: Sequence[BatchMetrics]) -> StageView:
    """A stage's metrics records (any order) as its view: batches in time order, channels of the newest.
    Records of another stage are refused (a topic read by mistake would mix two stages' figures)."""
    if strays := sorted({m.stage for m in records} - {stage}):
        raise ValueError(f"metrics of stage(s) {strays} given as stage {stage!r}'s")
    ordered = sorted(records, key=lambda m: (m.wall_time, m.batch_id))
    batches = stage_batches(
        [m.wall_time for m in ordered],
        [own_seconds(m) for m in ordered],
        [(m.input_records, m.output_rows or 0) for m in ordered],
        [m.channels for m in ordered],
        first_interval_s=ordered[0].batch_ms / 1000.0 if ordered else None,
    )
    return StageView(stage, ordered[-1].channels if ordered else 1, batches)


def later_stage_view(stage: str, records: Sequence[BatchMetrics], committed_epoch: int | None) -> StageView:
    """A later stage's view; NotReady while it has no batch yet, or none of its committed layout
    (its newest channel count would be the old layout's, and a decision on it would undo a rescale)."""
    if not records:
        raise NotReady(f"no metrics yet from stage {stage}: it has not finished a micro-batch")
    newest = max(records, key=lambda m: (m.wall_time, m.batch_id))
    if committed_epoch is not None and newest.epoch < committed_epoch:
        raise NotReady(
            f"waiting for the first batch of stage {stage} on layout epoch {committed_epoch} "
            f"(its newest batch ran on epoch {newest.epoch})"
        )
    return stage_view(stage, records)


def committed_epochs(spec, stages: Sequence[str]) -> dict[str, int]:
    """The committed layout epoch of each of `stages` (a stage without a layout yet is left out)."""
    from pipelines.streams.files import StreamFiles

    found = {}
    for stage in stages:
        if (layout := StreamFiles(spec, stage).committed_layout()) is not None:
            found[stage] = layout.epoch
    return found


class JobReadingCollector:
    """The job's snapshot: the stream's (as the single-stage sensor collects it) and every stage's view."""

    def __init__(
        self,
        reading: StreamReading,
        previous: OffsetSample | None,
        policy: ElasticityPolicy,
        later: Mapping[str, Sequence[BatchMetrics]],
        committed_epochs: Mapping[str, int] | None = None,
    ) -> None:
        self.reading, self.previous, self.policy, self.later = reading, previous, policy, later
        self.committed_epochs = committed_epochs or {}
        self.collected: Collected | None = None

    def collect(self, now_s: float) -> JobSnapshot:
        collected = collect(self.reading, self.previous, self.policy)  # NotReady: nothing to decide on
        awaited = collected.snapshot.awaited
        if awaited is not None:  # the job's controllers judge layouts in effect only
            raise NotReady(waiting_for_layout(awaited.epoch, collected.epoch))
        self.collected = collected
        first = stage_view(FIRST_STAGE, self.reading.metrics)
        first = StageView(FIRST_STAGE, self.collected.snapshot.channels, first.batches)
        later = (later_stage_view(name, rows, self.committed_epochs.get(name)) for name, rows in self.later.items())
        return JobSnapshot(self.collected.snapshot, (first, *later), self.collected.recent_input_rate_rps)


@dataclass(frozen=True)
class StageRescale:
    """One stage's rescale of a tick: the decision and its target."""

    stage: str
    decision_reason: str
    rule: str
    from_channels: int
    to_channels: int
    target: RescaleTarget


StagesHandOn = Callable[[Sequence[StageRescale]], None]
"""What carries a tick's rescales out (all stages' at once); raises if any cannot be."""


class StageTargetsRealizer:
    """The loop's realizer: each decision -> its stage's target, handed on together."""

    def __init__(self, collector: JobReadingCollector, hand_on: StagesHandOn) -> None:
        self.collector, self.hand_on = collector, hand_on
        self.realized: tuple[StageRescale, ...] = ()

    def apply(self, decisions: Sequence[StageDecision]) -> None:
        assert self.collector.collected is not None  # the loop collects before it realizes
        rescales = tuple(
            StageRescale(
                d.stage,
                d.decision.reason,
                d.decision.rule,
                d.decision.from_channels,
                d.decision.to_channels,
                target_for(d.decision, self.collector.collected.channels),
            )
            for d in decisions
        )
        self.hand_on(rescales)
        self.realized = rescales


@dataclass(frozen=True)
class StagesTickOutcome:
    """A tick's result: the cursor to keep, the rescales realized (maybe none) or why none."""

    cursor: str
    rescales: tuple[StageRescale, ...] = ()
    collected: Collected | None = None
    skip_reason: str | None = None
    congested: bool = False
    """The job-level evaluation of this tick found the job congested (lag or persistent overload)."""


def decide_stages_tick(
    cursor_text: str | None,
    reading: StreamReading,
    later: Mapping[str, Sequence[BatchMetrics]],
    policy: ElasticityPolicy,
    stages: StagesOptions,
    hand_on: StagesHandOn,
    committed_epochs: Mapping[str, int] | None = None,
) -> StagesTickOutcome:
    """One collect -> evaluate -> decide -> realize step of a multi-stage job (see the module docstring);
    `committed_epochs` are the later stages' committed layout epochs (their registries)."""
    control = policy.control_options()
    data = json.loads(cursor_text) if cursor_text else {}
    saved = data.get("loop")
    if not isinstance(saved, str):  # a single-stage sensor's cursor (the job had one stage): start afresh
        data, saved = {}, None
    offsets = OffsetSample.from_dict(data["offsets"]) if data.get("offsets") else None
    state = StagesLoopState.from_json(saved, control)
    collector = JobReadingCollector(reading, offsets, policy, later, committed_epochs)
    realizer = StageTargetsRealizer(collector, hand_on)
    loop = StagesLoop(stages, control, collector, realizer, ManualClock(reading.now_s), state)
    try:
        loop.tick()
    except NotReady as not_ready:
        return StagesTickOutcome(cursor=cursor_text or "", skip_reason=str(not_ready))
    assert collector.collected is not None
    cursor = json.dumps({"loop": loop.state_json(), "offsets": collector.collected.offsets.to_dict()})
    congested = loop.last_evaluation is not None and loop.last_evaluation.congested
    if realizer.realized:
        return StagesTickOutcome(cursor, realizer.realized, collector.collected, congested=congested)
    cooling = loop.cooling_down(reading.now_s)
    why = "cooling down after a rescale" if cooling else f"{stages.policy}: no stage to rescale"
    return StagesTickOutcome(cursor, (), collector.collected, why, congested)


def held_cursor(cursor_text: str | None, collected: Collected) -> str:
    """The cursor while automatic rescaling is off and the loop would rescale: the offsets move on,
    the loop's state stays as it was (nothing is decided while a person steers by hand), as the
    single-stage sensor keeps it."""
    data = json.loads(cursor_text) if cursor_text else {}
    saved = data.get("loop")
    return json.dumps({"loop": saved if isinstance(saved, str) else "", "offsets": collected.offsets.to_dict()})
