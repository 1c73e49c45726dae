"""As-Stream's typed inputs: one stage's monitoring samples and the topology of stages (a DAG).

A `StageSample` is one monitoring window Δw of one stage: the window's end time, the mean
latency of the rows it finished (γ_i of Eq. 6–8), its input workload D_in(w) of Eq. 10, the
rows it emitted, and the rows it has produced that still wait for its downstream (its output
queue q_out(w) of Eq. 10). The paper takes D_in(w) as the length of the stage's input queue, the
work offered to it in the window; over Kafka that is the rows that arrived in the window, plus
the stage's lag when the collector wants a backlog to count as offered work.

`StageMonitoring` is one stage's samples over the monitoring period, in time order. `Topology`
names the stages and their upstream links; a link carries the bandwidth B_ji of Eq. 11 in rows
per window (unbounded by default).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from elasticity.control.signals import FloatArray


def _require_finite(name: str, value: float, *, non_negative: bool = True) -> None:
    if not math.isfinite(value) or (non_negative and value < 0):
        raise ValueError(f"{name} must be a finite{' non-negative' if non_negative else ''} number, got {value!r}")


@dataclass(frozen=True)
class StageSample:
    """One monitoring window of one stage (see the module docstring for the paper's symbols)."""

    time_s: float
    mean_latency_s: float
    rows_in: float = 0.0
    rows_out: float = 0.0
    rows_queued_out: float = 0.0

    def __post_init__(self) -> None:
        _require_finite("time_s", self.time_s, non_negative=False)
        _require_finite("mean_latency_s", self.mean_latency_s)
        _require_finite("rows_in", self.rows_in)
        _require_finite("rows_out", self.rows_out)
        _require_finite("rows_queued_out", self.rows_queued_out)


@dataclass(frozen=True)
class StageMonitoring:
    """A stage's samples in time order (equal times allowed: two probes in the same instant)."""

    stage: str
    samples: tuple[StageSample, ...]

    def __post_init__(self) -> None:
        times = [sample.time_s for sample in self.samples]
        if any(later < earlier for earlier, later in zip(times, times[1:])):
            raise ValueError(f"stage {self.stage!r}: samples must be in time order")

    @classmethod
    def of(cls, stage: str, samples: Iterable[StageSample]) -> StageMonitoring:
        return cls(stage, tuple(samples))

    def within(self, period_s: float) -> StageMonitoring:
        """Only the samples of the last `period_s` seconds up to the latest one (both ends included)."""
        if not self.samples:
            return self
        start_s = self.samples[-1].time_s - period_s
        return StageMonitoring(self.stage, tuple(s for s in self.samples if s.time_s >= start_s))

    @property
    def latest(self) -> StageSample | None:
        return self.samples[-1] if self.samples else None

    @property
    def times_s(self) -> FloatArray:
        return np.array([s.time_s for s in self.samples], dtype=np.float64)

    @property
    def latencies_s(self) -> FloatArray:
        return np.array([s.mean_latency_s for s in self.samples], dtype=np.float64)


def by_stage(monitorings: Iterable[StageMonitoring]) -> dict[str, StageMonitoring]:
    """The monitorings keyed by stage name; a stage given twice is an error, not a silent overwrite."""
    found: dict[str, StageMonitoring] = {}
    for monitoring in monitorings:
        if monitoring.stage in found:
            raise ValueError(f"stage {monitoring.stage!r} is monitored twice")
        found[monitoring.stage] = monitoring
    return found


@dataclass(frozen=True)
class StageLink:
    """Rows flow from `upstream` to `downstream`, at most `bandwidth_rows` per window (B_ji of Eq. 11)."""

    upstream: str
    downstream: str
    bandwidth_rows: float = math.inf

    def __post_init__(self) -> None:
        if self.upstream == self.downstream:
            raise ValueError(f"stage {self.upstream!r} cannot be its own upstream")
        if math.isnan(self.bandwidth_rows) or self.bandwidth_rows < 0:
            raise ValueError(f"bandwidth of {self.upstream!r} -> {self.downstream!r} must be >= 0")


@dataclass(frozen=True)
class Topology:
    """Stages and their upstream links; a DAG (checked), each link at most once."""

    stages: tuple[str, ...]
    links: tuple[StageLink, ...] = ()

    def __post_init__(self) -> None:
        if len(set(self.stages)) != len(self.stages):
            raise ValueError(f"stage names repeat: {self.stages}")
        known = set(self.stages)
        pairs = [(link.upstream, link.downstream) for link in self.links]
        for upstream, downstream in pairs:
            if upstream not in known or downstream not in known:
                raise ValueError(f"link {upstream!r} -> {downstream!r} names an unknown stage")
        if len(set(pairs)) != len(pairs):
            raise ValueError("a link between two stages is given twice")
        self.topological_order()  # raises on a cycle

    @classmethod
    def chain(cls, *stages: str) -> Topology:
        """A linear pipeline stages[0] -> stages[1] -> ..., links unbounded."""
        return cls(tuple(stages), tuple(StageLink(a, b) for a, b in zip(stages, stages[1:])))

    def upstream_links(self, stage: str) -> tuple[StageLink, ...]:
        """The links into `stage` (U_i of Eq. 11); empty for a source stage."""
        return tuple(link for link in self.links if link.downstream == stage)

    def topological_order(self) -> tuple[str, ...]:
        """Every stage after all its upstreams; deterministic (Kahn's algorithm, sources in declaration order)."""
        indegree = {stage: len(self.upstream_links(stage)) for stage in self.stages}
        ready = [stage for stage in self.stages if indegree[stage] == 0]
        order: list[str] = []
        while ready:
            stage = ready.pop(0)
            order.append(stage)
            for link in self.links:
                if link.upstream == stage:
                    indegree[link.downstream] -= 1
                    if indegree[link.downstream] == 0:
                        ready.append(link.downstream)
        if len(order) != len(self.stages):
            cyclic = sorted(set(self.stages) - set(order))
            raise ValueError(f"the topology has a cycle through {cyclic}")
        return tuple(order)
