"""The elastic control loop: detectors, SASO controller with levels, loop, clock, simulation.

Pure Python (numpy + pydantic). `ElasticLoop` wires a `MetricsCollector`, the controller and a
`Realizer`; it is the one loop: the Dagster sensor runs it once per evaluation, restored from the
`LoopState` JSON in its cursor, the real-stack benchmark likewise, and `simulation` drives it on a
queueing model.
`elasticity.control.asstream` is As-Stream (seed 002) for multi-stage jobs: bottleneck levels,
Eq. 9 plans and the Eq. 10–11 prediction behind pre-scaling.
"""

from elasticity.control.clock import Clock, ManualClock, SystemClock
from elasticity.control.controller import (
    ControllerState,
    LevelRecord,
    PendingRescale,
    ReadyTick,
    ScalingController,
    SteadyInput,
)
from elasticity.control.decision import Action, Decision
from elasticity.control.detectors import SignalWindows, evaluate
from elasticity.control.levels import Levels, level_sequence
from elasticity.control.loop import (
    ElasticLoop,
    LoopState,
    MetricsCollector,
    Realizer,
    RecordingRealizer,
)
from elasticity.control.options import (
    CongestionOptions,
    ControllerOptions,
    ControlOptions,
    OverloadOptions,
    SettlingOptions,
    UnderloadOptions,
)
from elasticity.control.signals import CommittedLayout, CongestionSignal, Evaluation, MetricsSnapshot

__all__ = [
    "Action",
    "Clock",
    "CommittedLayout",
    "CongestionOptions",
    "CongestionSignal",
    "ControlOptions",
    "ControllerOptions",
    "ControllerState",
    "Decision",
    "ElasticLoop",
    "Evaluation",
    "LevelRecord",
    "Levels",
    "LoopState",
    "ManualClock",
    "MetricsCollector",
    "MetricsSnapshot",
    "OverloadOptions",
    "PendingRescale",
    "ReadyTick",
    "Realizer",
    "RecordingRealizer",
    "ScalingController",
    "SettlingOptions",
    "SignalWindows",
    "SteadyInput",
    "SystemClock",
    "UnderloadOptions",
    "evaluate",
    "level_sequence",
]
