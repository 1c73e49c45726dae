"""The elastic loop of a multi-stage job: collect -> evaluate -> decide -> realize, per stage.

The same four steps as `elasticity.control.loop.ElasticLoop`, and the same evaluate step (the
single-stage detectors on the job's stream signals, whose windows live in the state); what
differs is what is collected (a `JobSnapshot`: the stream plus every stage's recent batches),
decided (a `StagePolicy`: at most one `Decision` per stage) and realized (a `StagesRealizer`:
every stage's rescale of the tick, one run per stage). The sensor, the real-stack benchmark and
the unit tests run this one class with their own collector and realizer.

After a realized rescale the loop waits `cooldown_s` and restarts its windows as a layout change
does (the rescale's pause and settling are masked): what was measured before a stage changed
says little about the job after it, and a later stage's rescale does not change the first
stage's layout epoch, which is what restarts the single-stage windows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from elasticity.control.asstream.job import JobSnapshot
from elasticity.control.asstream.options import StagesOptions
from elasticity.control.asstream.policies import StageDecision, stage_policy
from elasticity.control.clock import Clock
from elasticity.control.controller import ControllerState
from elasticity.control.detectors import SignalWindows, evaluate
from elasticity.control.options import ControlOptions
from elasticity.control.signals import Evaluation


@runtime_checkable
class JobCollector(Protocol):
    def collect(self, now_s: float) -> JobSnapshot:
        """One sampling period's view of the job, taken at clock time `now_s`."""
        ...


@runtime_checkable
class StagesRealizer(Protocol):
    def apply(self, decisions: Sequence[StageDecision]) -> None:
        """Carry out this tick's rescales (one per stage, never empty). Raise if any cannot."""
        ...


class RecordingStagesRealizer:
    """The test fake: remembers every tick's decisions, changes nothing."""

    def __init__(self) -> None:
        self.ticks: list[tuple[StageDecision, ...]] = []

    def apply(self, decisions: Sequence[StageDecision]) -> None:
        self.ticks.append(tuple(decisions))


class StagesLoopState:
    """The loop's memory: the job-level windows, the together policy's controller state, the cooldown."""

    def __init__(
        self,
        windows: SignalWindows | None = None,
        controller: ControllerState | None = None,
        cooldown_until_s: float | None = None,
    ) -> None:
        self.windows = windows
        self.controller = controller if controller is not None else ControllerState()
        self.cooldown_until_s = cooldown_until_s

    def to_json(self) -> str:
        return json.dumps(
            {
                "windows": None if self.windows is None else self.windows.to_dict(),
                "controller": self.controller.model_dump(mode="json"),
                "cooldown_until_s": self.cooldown_until_s,
            }
        )

    @classmethod
    def from_json(cls, text: str | None, options: ControlOptions) -> StagesLoopState:
        """Restore a saved state; None or empty text gives a fresh one."""
        if not text:
            return cls()
        data: dict[str, Any] = json.loads(text)
        windows = data.get("windows")
        return cls(
            None if windows is None else SignalWindows.from_dict(windows, options),
            ControllerState.model_validate(data["controller"]),
            data.get("cooldown_until_s"),
        )


class StagesLoop:
    """Runs the four steps once per `tick()` for every stage of a job."""

    def __init__(
        self,
        options: StagesOptions,
        control: ControlOptions,
        collector: JobCollector,
        realizer: StagesRealizer,
        clock: Clock,
        state: StagesLoopState | None = None,
    ) -> None:
        if options.scale_in_utilization >= options.asstream.target_utilization:
            raise ValueError(
                f"scale_in_utilization {options.scale_in_utilization} must be below the target utilization "
                f"{options.asstream.target_utilization}, or a shrunk stage would grow again at once"
            )
        self.options = options
        self.control = control
        self.collector = collector
        self.realizer = realizer
        self.clock = clock
        self.policy = stage_policy(options, control.controller)
        self.state = state if state is not None else StagesLoopState()
        self.last_evaluation: Evaluation | None = None
        self.last_job: JobSnapshot | None = None

    def cooling_down(self, now_s: float) -> bool:
        return self.state.cooldown_until_s is not None and now_s < self.state.cooldown_until_s

    def tick(self) -> tuple[StageDecision, ...]:
        now_s = self.clock.now()
        job = self.collector.collect(now_s)
        windows, evaluation = evaluate(self.state.windows, job.stream, self.control)
        self.last_evaluation, self.last_job = evaluation, job
        if self.cooling_down(now_s):
            self.state = StagesLoopState(windows, self.state.controller, self.state.cooldown_until_s)
            return ()
        controller, decisions = self.policy.decide(self.state.controller, evaluation, job, now_s)
        if not decisions:
            self.state = StagesLoopState(windows, controller, self.state.cooldown_until_s)
            return ()
        # Realize before committing: if it raises, the state stays as it was and the next tick
        # decides again instead of cooling down after nothing happened.
        self.realizer.apply(decisions)
        restarted = windows.after_rescale(job.stream, self.control)
        self.state = StagesLoopState(restarted, controller, now_s + self.options.cooldown_s)
        return decisions

    def state_json(self) -> str:
        return self.state.to_json()
