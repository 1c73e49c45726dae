"""The elastic loop, flink-autoscaler style: collect -> evaluate -> decide -> realize.

Integrations plug in behind two small protocols: a `MetricsCollector` returns one
`MetricsSnapshot` per sampling period, a `Realizer` applies a rescale `Decision` (the Dagster
sensor's realizer requests a rescale run; the simulation's changes its queueing model; tests use
`RecordingRealizer`). The loop's whole memory is a `LoopState` (detector windows + controller
state) that serializes to JSON, so a Dagster sensor keeps it in its cursor and runs one loop,
restored from it, per evaluation (`orchestration.elasticity.tick`), holding no object between ticks.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from elasticity.control.clock import Clock
from elasticity.control.controller import ControllerState, ScalingController
from elasticity.control.decision import Decision
from elasticity.control.detectors import SignalWindows, evaluate
from elasticity.control.options import ControlOptions
from elasticity.control.signals import Evaluation, MetricsSnapshot


@runtime_checkable
class MetricsCollector(Protocol):
    def collect(self, now_s: float) -> MetricsSnapshot:
        """One sampling period's metrics, taken at clock time `now_s`."""
        ...


@runtime_checkable
class Realizer(Protocol):
    def apply(self, decision: Decision) -> None:
        """Carry out a rescale decision (never called with action 'none'). Raise if it cannot."""
        ...


class RecordingRealizer:
    """The test fake: remembers every decision it was asked to realize, changes nothing."""

    def __init__(self) -> None:
        self.decisions: list[Decision] = []

    def apply(self, decision: Decision) -> None:
        self.decisions.append(decision)


class LoopState:
    """Detector windows and controller state: all the loop remembers. Immutable by convention."""

    def __init__(self, controller: ControllerState | None = None, windows: SignalWindows | None = None) -> None:
        self.controller = controller if controller is not None else ControllerState()
        self.windows = windows

    def to_json(self) -> str:
        return json.dumps(
            {
                "controller": self.controller.model_dump(mode="json"),
                "windows": None if self.windows is None else self.windows.to_dict(),
            }
        )

    @classmethod
    def from_json(cls, text: str | None, options: ControlOptions) -> LoopState:
        """Restore a saved state; None or empty text (a fresh sensor cursor) gives a fresh state."""
        if not text:
            return cls()
        data: dict[str, Any] = json.loads(text)
        windows_data = data.get("windows")
        windows = None if windows_data is None else SignalWindows.from_dict(windows_data, options)
        return cls(controller=ControllerState.model_validate(data["controller"]), windows=windows)


class ElasticLoop:
    """Runs the four stages once per `tick()`; keeps the state between ticks in memory."""

    def __init__(
        self,
        options: ControlOptions,
        collector: MetricsCollector,
        realizer: Realizer,
        clock: Clock,
        state: LoopState | None = None,
    ) -> None:
        self.options = options
        self.collector = collector
        self.realizer = realizer
        self.clock = clock
        self.controller = ScalingController(options.controller)
        self.state = state if state is not None else LoopState()
        self.last_evaluation: Evaluation | None = None

    def tick(self) -> Decision:
        now_s = self.clock.now()
        snapshot = self.collector.collect(now_s)
        windows, evaluation = evaluate(self.state.windows, snapshot, self.options)
        controller_state, decision = self.controller.decide(self.state.controller, evaluation, now_s)
        if decision.is_rescale:
            # Realize before committing: if it raises, the state (cooldown, history) stays as it
            # was, and the next tick decides again instead of cooling down after nothing happened.
            self.realizer.apply(decision)
        self.state = LoopState(controller_state, windows)
        self.last_evaluation = evaluation
        return decision

    def state_json(self) -> str:
        return self.state.to_json()
