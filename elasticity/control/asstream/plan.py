"""As-Stream's plan generation (seed 002, §2.3, Eq. 9) as a selectable planning policy.

The parameter-plan-first policy: N'_task = φ · (N_executer + N_bottleneck) / N_executer · N_task,
φ = 1 by default. Table 5 (N_executer, N_task, N_bottleneck → N'_task) reads 8, 16, 3 → 22;
10, 10, 2 → 12; 5, 10, 1 → 12, in the order of the table's header, and all three are exact
integers, so the table says nothing about rounding. A fractional result is rounded *up*: the
plan answers a bottleneck, and rounding down would give back part of the relief it computed
(with φ = 1 and N_bottleneck ≥ 1 it also keeps N' > N_task). The product is taken in exact
rational arithmetic (φ by its decimal repr), so 22 stays 22 and never becomes 23 by round-off.
In esp a task is a channel, so the result is clamped to [min_channels, max_channels] (and
`elasticity.layout.MAX_CHANNELS`).

The paper's other strategy (bottleneck level first: hand spare operators to stages in level
order) needs a budget of spare operators that esp does not have yet; `PlanningPolicy` is the
seam where it would go, and `planning_policy(options)` selects by `AsStreamOptions.planning_policy`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol, runtime_checkable

from elasticity.control.asstream.bottleneck import BottleneckReport
from elasticity.control.asstream.options import AsStreamOptions
from elasticity.layout import MAX_CHANNELS


@runtime_checkable
class PlanningPolicy(Protocol):
    def new_tasks(self, executors: int, bottleneck_level: int, tasks: int) -> int:
        """N'_task for a stage with `executors` executors, bottleneck level and `tasks` tasks (channels)."""
        ...


def parameter_plan(phi: float, executors: int, bottleneck_level: int, tasks: int) -> Fraction:
    """Eq. 9 exactly, unrounded and unclamped."""
    if executors < 1 or tasks < 1 or bottleneck_level < 0:
        raise ValueError(
            f"need executors >= 1, tasks >= 1, bottleneck level >= 0; got {executors}, {tasks}, {bottleneck_level}"
        )
    return Fraction(repr(phi)) * Fraction(executors + bottleneck_level, executors) * tasks


class ParameterPlanPolicy:
    """Eq. 9, rounded up and clamped to [min_channels, max_channels]."""

    name = "parameter_plan"

    def __init__(self, phi: float = 1.0, min_channels: int = 1, max_channels: int = MAX_CHANNELS) -> None:
        if phi <= 0 or not math.isfinite(phi):
            raise ValueError(f"phi must be a positive number, got {phi}")
        if not 1 <= min_channels <= max_channels <= MAX_CHANNELS:
            raise ValueError(f"need 1 <= min_channels <= max_channels <= {MAX_CHANNELS}")
        self.phi = phi
        self.min_channels = min_channels
        self.max_channels = max_channels

    def new_tasks(self, executors: int, bottleneck_level: int, tasks: int) -> int:
        planned = math.ceil(parameter_plan(self.phi, executors, bottleneck_level, tasks))
        return max(self.min_channels, min(self.max_channels, planned))


def planning_policy(options: AsStreamOptions) -> PlanningPolicy:
    """The policy `options.planning_policy` names, built from the options' φ and channel bounds."""
    if options.planning_policy == "parameter_plan":
        return ParameterPlanPolicy(options.phi, options.min_channels, options.max_channels)
    raise ValueError(f"unknown planning policy {options.planning_policy!r}")


@dataclass(frozen=True)
class StageParallelism:
    """What a stage runs with now: executors (N_executer) and tasks, i.e. channels (N_task)."""

    stage: str
    executors: int
    tasks: int


@dataclass(frozen=True)
class StagePlan:
    """One stage's plan: its level and the task count before and after."""

    stage: str
    bottleneck_level: int
    tasks: int
    new_tasks: int

    @property
    def changes(self) -> bool:
        return self.new_tasks != self.tasks


def plan_stages(
    report: BottleneckReport, parallelism: Sequence[StageParallelism], policy: PlanningPolicy
) -> tuple[StagePlan, ...]:
    """A plan per stage in the report's ranking (bottleneck first), as §2.3 walks the level table."""
    current = {p.stage: p for p in parallelism}
    plans = []
    for ranked in report.stages:
        now = current.get(ranked.stage)
        if now is None:
            raise ValueError(f"no parallelism given for stage {ranked.stage!r}")
        plans.append(
            StagePlan(ranked.stage, ranked.level, now.tasks, policy.new_tasks(now.executors, ranked.level, now.tasks))
        )
    return tuple(plans)
