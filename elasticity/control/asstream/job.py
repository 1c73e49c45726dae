"""What the multi-stage loop collects per tick: the job's stream signals and each stage's recent batches.

A `JobSnapshot` is a `MetricsSnapshot` of the stream as a whole (the first stage's channels, the
Kafka lag in front of it, the probes through the whole chain: what the single-stage detectors
judge overload and underload on) plus, per stage in chain order, its channels now and its recent
batches (`StageBatch`: end time, the stage's own processing time, rows in and out, channels).

`StageView` derives what the planning policies size with, per stage:

- `rates()`: the stage's batches as As-Stream monitoring samples in rows per second (a window
  Δw normalised to one second, so micro-batches of any length compare): γ_i = the stage's own
  time in the batch, D_in = rows in / batch interval, rows out likewise;
- `capacity_per_channel_rps()`: the most rows per second one channel was seen to process (rows
  in / (own time × channels)); the best batch, because a small batch's fixed overhead makes
  the per-row cost look higher than it is;
- `busy_share()`: the share of the recent wall time the stage spent processing, the reactive
  measure of which stage holds the job back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from elasticity.control.asstream.inputs import StageMonitoring, StageSample, Topology
from elasticity.control.signals import MetricsSnapshot

MIN_CAPACITY_ROWS = 50
"""A batch with fewer input rows says too little about a channel's capacity (overhead dominates)."""


@dataclass(frozen=True)
class StageBatch:
    """One micro-batch of one stage."""

    time_s: float
    """When the batch ended (wall clock)."""
    interval_s: float
    """Seconds since the previous batch of the stage ended (the window Δw this batch stands for)."""
    stage_s: float
    """The stage's own processing time in the batch (all its channels, in parallel)."""
    rows_in: int
    rows_out: int
    channels: int


@dataclass(frozen=True)
class StageView:
    """One stage: its name, channels now, and its recent batches in time order."""

    stage: str
    channels: int
    batches: tuple[StageBatch, ...]

    def within(self, period_s: float, now_s: float) -> tuple[StageBatch, ...]:
        return tuple(b for b in self.batches if b.time_s >= now_s - period_s)

    def rates(self, period_s: float, now_s: float) -> StageMonitoring:
        """The period's batches as monitoring samples in rows per second (see the module docstring)."""
        return StageMonitoring.of(
            self.stage,
            (
                StageSample(
                    time_s=b.time_s,
                    mean_latency_s=b.stage_s,
                    rows_in=b.rows_in / b.interval_s,
                    rows_out=b.rows_out / b.interval_s,
                )
                for b in self.within(period_s, now_s)
                if b.interval_s > 0
            ),
        )

    def input_rate_rps(self, period_s: float, now_s: float) -> float | None:
        """Rows per second the stage took in over the period (None without batches)."""
        recent = self.within(period_s, now_s)
        span = sum(b.interval_s for b in recent)
        return sum(b.rows_in for b in recent) / span if span > 0 else None

    def capacity_per_channel_rps(self, period_s: float, now_s: float) -> float | None:
        """The most rows per second one channel processed in a batch of the period (None: no batch
        large enough to tell)."""
        seen = [
            b.rows_in / (b.stage_s * b.channels)
            for b in self.within(period_s, now_s)
            if b.rows_in >= MIN_CAPACITY_ROWS and b.stage_s > 0 and b.channels > 0
        ]
        return max(seen) if seen else None

    def busy_share(self, period_s: float, now_s: float) -> float:
        """Share of the period's wall time the stage spent processing (0 without batches)."""
        recent = self.within(period_s, now_s)
        span = sum(b.interval_s for b in recent)
        return min(1.0, sum(b.stage_s for b in recent) / span) if span > 0 else 0.0


@dataclass(frozen=True)
class JobSnapshot:
    """One tick's view of a multi-stage job (see the module docstring)."""

    stream: MetricsSnapshot
    stages: tuple[StageView, ...]
    recent_arrival_rps: float | None = None
    """Records/s that reached the source in the last few seconds (None: only the period's rate is known)."""

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError("a job has at least one stage")
        names = [s.stage for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names repeat: {names}")

    @property
    def topology(self) -> Topology:
        return Topology.chain(*(s.stage for s in self.stages))

    @property
    def source(self) -> StageView:
        return self.stages[0]

    def of(self, stage: str) -> StageView:
        for view in self.stages:
            if view.stage == stage:
                return view
        raise KeyError(stage)


def stage_batches(
    ends_s: Sequence[float],
    stage_s: Sequence[float],
    rows: Sequence[tuple[int, int]],
    channels: Sequence[int],
    first_interval_s: float | None = None,
) -> tuple[StageBatch, ...]:
    """Batches from parallel sequences in time order. Nothing before the first one to measure its
    interval from: it is `first_interval_s` (the whole batch's duration, when known) or the
    stage's own time in it."""
    batches = []
    for index, end in enumerate(ends_s):
        if index:
            interval = end - ends_s[index - 1]
        else:
            interval = stage_s[0] if first_interval_s is None else first_interval_s
        rows_in, rows_out = rows[index]
        batches.append(StageBatch(end, max(interval, 1e-3), stage_s[index], rows_in, rows_out, channels[index]))
    return tuple(batches)
