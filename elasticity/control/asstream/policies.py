"""The multi-stage loop's decide step: three policies, one `StagePolicy` seam.

Each policy gets the job-level `Evaluation` (the single-stage detectors on the stream as a whole:
Kafka lag congestion, probe overload, readiness after warm-up) and the `JobSnapshot`, and returns
at most one `Decision` per stage:

- `AsStreamPolicy` (seed 002): every tick, each downstream stage is pre-scaled to the input
  Eq. 10-11 predict for it from the rows offered to the source (the Kafka arrival of the last
  seconds, `JobSnapshot.recent_arrival_rps`, when it is above the period's) and the stages' mean
  selectivities, before its backlog shows; when the job is congested, the stage the bottleneck
  ranking (Eq. 6-8) puts first is grown by Eq. 9; when the job is quiet, a stage whose predicted
  input leaves most of its capacity idle shrinks.
- `ReactivePolicy`: the same without prediction or ranking: when the job is congested, the stage
  that was busiest grows by the share it was over the target utilization; a stage shrinks on its
  measured input.
- `TogetherPolicy`: the single-stage `ScalingController` on the stream, its channel count given to
  every stage (what esp did before stages had controllers of their own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from elasticity.control.asstream.bottleneck import identify_bottlenecks
from elasticity.control.asstream.inputs import StageMonitoring
from elasticity.control.asstream.job import JobSnapshot, StageView
from elasticity.control.asstream.options import AsStreamOptions, StagesOptions
from elasticity.control.asstream.plan import ParameterPlanPolicy
from elasticity.control.asstream.prediction import channels_needed, pre_scale, predict_next_inputs
from elasticity.control.controller import ControllerState, ScalingController
from elasticity.control.decision import Decision
from elasticity.control.options import ControllerOptions
from elasticity.control.signals import Evaluation


@dataclass(frozen=True)
class StageDecision:
    """A decision for one named stage."""

    stage: str
    decision: Decision


class StagePolicy(Protocol):
    name: str

    def decide(
        self, state: ControllerState, evaluation: Evaluation, job: JobSnapshot, now_s: float
    ) -> tuple[ControllerState, tuple[StageDecision, ...]]:
        """The stages to rescale this tick (at most one decision each) and the controller state to keep."""
        ...


def job_congested(evaluation: Evaluation) -> bool:
    """The job falls behind: lag congestion or persistent overload, with full windows to judge on."""
    return evaluation.ready_up and evaluation.congested


def job_quiet(evaluation: Evaluation) -> bool:
    """The job keeps up with room to spare long enough for shrinking to be considered."""
    return evaluation.ready_down and not evaluation.congested


def rescale(
    stage: str, channels: int, to: int, rule: str, reason: str, now_s: float, **signals: float
) -> StageDecision:
    """A scale-out or scale-in of `stage` from `channels` to `to`."""
    action = "scale_out" if to > channels else "scale_in"
    return StageDecision(
        stage,
        Decision(
            time_s=now_s,
            action=action,
            from_channels=channels,
            to_channels=to,
            rule=rule,
            signals=signals,
            reason=reason,
        ),
    )


MIN_SHARE = 0.1
"""A stage's utilization budget never goes below this share, however busy the others were."""


def stage_budget(job: JobSnapshot, stage: str, options: StagesOptions, now_s: float) -> AsStreamOptions:
    """As-Stream's options with the target utilization `stage` may plan for: the stages of a
    micro-batch run one after the other, so a stage has only the wall time the others leave,
    target_utilization x (1 - their busy share)."""
    period = options.asstream.monitoring_period_s
    others = sum(v.busy_share(period, now_s) for v in job.stages if v.stage != stage)
    share = max(MIN_SHARE, options.asstream.target_utilization * (1.0 - min(1.0, others)))
    return options.asstream.model_copy(update={"target_utilization": share})


def shrink(
    job: JobSnapshot,
    view: StageView,
    rate_rps: float | None,
    capacity_rps: float | None,
    options: StagesOptions,
    rule: str,
    basis: str,
    now_s: float,
) -> StageDecision | None:
    """Scale `view` in when `rate_rps` uses less than `scale_in_utilization` of its channels, to the
    channels that carry it within the stage's budget (`stage_budget`; None: keep it, also when the
    rate or the capacity is not known)."""
    if rate_rps is None or capacity_rps is None:
        return None
    utilization = rate_rps / (capacity_rps * view.channels)
    budget = stage_budget(job, view.stage, options, now_s)
    needed = channels_needed(rate_rps, capacity_rps, budget)
    if utilization >= options.scale_in_utilization or needed >= view.channels:
        return None
    reason = (
        f"stage {view.stage}: {basis} {rate_rps:,.0f} rows/s use {utilization:.0%} of {view.channels} channels at "
        f"{capacity_rps:,.0f} rows/s each (< {options.scale_in_utilization:.0%}); scale in to {needed} "
        f"({budget.target_utilization:.0%} utilization, what the other stages leave)."
    )
    return rescale(view.stage, view.channels, needed, rule, reason, now_s, rate_rps=rate_rps, utilization=utilization)


class AsStreamPolicy:
    """Seed 002's bottleneck identification, plan generation and prediction (see the module docstring)."""

    name = "as-stream"

    def __init__(self, options: StagesOptions) -> None:
        self.options = options
        self.plan = ParameterPlanPolicy(
            options.asstream.phi, options.asstream.min_channels, options.asstream.max_channels
        )

    def decide(
        self, state: ControllerState, evaluation: Evaluation, job: JobSnapshot, now_s: float
    ) -> tuple[ControllerState, tuple[StageDecision, ...]]:
        period = self.options.asstream.monitoring_period_s
        monitorings = [view.rates(period, now_s) for view in job.stages]
        # The source's workload is what arrives on Kafka, not what it got through (As-Stream's input
        # queue). The last seconds of it show a rise just before the tick that the period's average
        # (and the lag) would show a tick later; the larger of the two, because record timestamps
        # are the producers' (an event-time producer's look old) and a fall can wait a tick.
        offered = max(evaluation.input_rate_rps, job.recent_arrival_rps or 0.0)
        arrival = {job.source.stage: offered}
        prediction = predict_next_inputs(job.topology, monitorings, self.options.asstream, arrival, arrival)
        decisions: dict[str, StageDecision] = {}
        for view in job.stages[1:]:
            capacity = view.capacity_per_channel_rps(period, now_s)
            if capacity is None:
                continue
            budget = stage_budget(job, view.stage, self.options, now_s)
            ahead = pre_scale(prediction.of(view.stage), view.channels, capacity, budget, now_s)
            if ahead.is_rescale:
                decisions[view.stage] = StageDecision(view.stage, ahead)
        if job_congested(evaluation):
            grown = self._grow_bottleneck(monitorings, job, evaluation, now_s, decisions)
            if grown is not None:
                decisions[grown.stage] = grown
        elif job_quiet(evaluation) and not decisions:
            for view in job.stages:
                capacity = view.capacity_per_channel_rps(period, now_s)
                rate = prediction.of(view.stage).next_input_rows
                smaller = shrink(job, view, rate, capacity, self.options, "as-stream-shrink", "predicted input", now_s)
                if smaller is not None:
                    decisions[view.stage] = smaller
        return state, tuple(decisions.values())

    def _grow_bottleneck(
        self,
        monitorings: list[StageMonitoring],
        job: JobSnapshot,
        evaluation: Evaluation,
        now_s: float,
        decided: dict[str, StageDecision],
    ) -> StageDecision | None:
        """Eq. 9 for the highest-ranked stage that can still grow (the busiest first among equals)."""
        report = identify_bottlenecks(monitorings, self.options.asstream)
        period = self.options.asstream.monitoring_period_s
        busy = {view.stage: view.busy_share(period, now_s) for view in job.stages}
        ranked = sorted(job.stages, key=lambda v: (-report.level_of(v.stage), -busy[v.stage]))
        for view in ranked:
            level = max(1, report.level_of(view.stage))
            predicted = decided[view.stage].decision.to_channels if view.stage in decided else view.channels
            target = max(predicted, self.plan.new_tasks(self.options.executors, level, view.channels))
            if target <= predicted:
                continue
            reason = (
                f"stage {view.stage} is the bottleneck (level {report.level_of(view.stage)}, busy "
                f"{busy[view.stage]:.0%} of the time) while the job is congested (lag "
                f"{evaluation.total_lag_records:,.0f} records); Eq. 9 with N_executer {self.options.executors}: "
                f"{view.channels} -> {target} channels."
            )
            return rescale(
                view.stage,
                view.channels,
                target,
                "as-stream-plan",
                reason,
                now_s,
                level=float(level),
                busy_share=busy[view.stage],
            )
        return None


class ReactivePolicy:
    """Per stage, from what was measured only (see the module docstring)."""

    name = "reactive"

    def __init__(self, options: StagesOptions) -> None:
        self.options = options

    def decide(
        self, state: ControllerState, evaluation: Evaluation, job: JobSnapshot, now_s: float
    ) -> tuple[ControllerState, tuple[StageDecision, ...]]:
        period = self.options.asstream.monitoring_period_s
        bounds = self.options.asstream
        if job_congested(evaluation):
            growable = [v for v in job.stages if v.channels < bounds.max_channels]
            if not growable:
                return state, ()
            view = max(growable, key=lambda v: v.busy_share(period, now_s))
            busy = view.busy_share(period, now_s)
            target = bounds.clamp_channels(
                max(view.channels + 1, math.ceil(view.channels * busy / bounds.target_utilization))
            )
            reason = (
                f"stage {view.stage} was the busiest ({busy:.0%} of the time) while the job is congested (lag "
                f"{evaluation.total_lag_records:,.0f} records); {view.channels} -> {target} channels for "
                f"{bounds.target_utilization:.0%} utilization."
            )
            return state, (rescale(view.stage, view.channels, target, "reactive", reason, now_s, busy_share=busy),)
        if not job_quiet(evaluation):
            return state, ()
        decisions = []
        for view in job.stages:
            capacity = view.capacity_per_channel_rps(period, now_s)
            rate = view.input_rate_rps(period, now_s)
            smaller = shrink(job, view, rate, capacity, self.options, "reactive-shrink", "measured input", now_s)
            if smaller is not None:
                decisions.append(smaller)
        return state, tuple(decisions)


class TogetherPolicy:
    """The single-stage controller's decision on the stream, the same channel count for every stage."""

    name = "together"

    def __init__(self, controller: ControllerOptions) -> None:
        self.controller = ScalingController(controller)

    def decide(
        self, state: ControllerState, evaluation: Evaluation, job: JobSnapshot, now_s: float
    ) -> tuple[ControllerState, tuple[StageDecision, ...]]:
        state, decision = self.controller.decide(state, evaluation, now_s)
        if not decision.is_rescale:
            return state, ()
        target = decision.to_channels
        reason = f"every stage follows the job's decision: {decision.reason}"
        return state, tuple(
            rescale(view.stage, view.channels, target, f"together-{decision.rule}", reason, now_s, **decision.signals)
            for view in job.stages
            if view.channels != target
        )


def stage_policy(options: StagesOptions, controller: ControllerOptions) -> StagePolicy:
    """The policy `options.policy` names."""
    if options.policy == "as-stream":
        return AsStreamPolicy(options)
    if options.policy == "reactive":
        return ReactivePolicy(options)
    return TogetherPolicy(controller)
