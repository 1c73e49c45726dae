"""As-Stream's parallel bottleneck identification (seed 002, §2.2, Eq. 4–8).

Per stage, over the monitoring period:

1. fit the least-squares line f(t) = ωt + b through the points (t_i, γ_i) = (time, mean
   latency): Eq. 6 is the mean squared error, Eq. 7 its partial derivatives, Eq. 8 their zero:
   ω = Σ γ_i (t_i − t̄) / (Σ t_i² − (Σ t_i)² / M), b = (1/M) Σ (γ_i − ω t_i);
2. a point above the line (γ_i > f(t_i)) gives an effective bottleneck value, f(t_i) as the
   paper's step 5 says (or γ_i, `AsStreamOptions.bottleneck_value`);
3. the period is cut into bottleneck intervals; T_bottleneck is the largest effective value in
   an interval;
4. an interval's T_bottleneck counts when it recurs (the interval holds at least
   `min_recurrences` effective values) and is of the order of T, the reference time of Eq. 5
   (T = max(Σ compute time, Σ communication time));
5. the stages with a counting T_bottleneck form the bottleneck level table, sorted from high to
   low: of K such stages the highest gets level K, the next K − 1, ..., the lowest 1 (equal
   values share a level, and the levels below close up); every other stage has level 0. This
   is the integer N_bottleneck of Eq. 9 (Table 5 uses levels 3, 2, 1).

Degenerate input never reaches numpy's error paths: no sample gives no line (`line is None`)
and level 0; one sample, or samples all at the same time, give the horizontal line through the
mean latency (the least-squares line is not unique there; the horizontal one minimises Eq. 6
among them); a point exactly on the line (up to float round-off) is not above it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from elasticity.control.asstream.inputs import StageMonitoring, by_stage
from elasticity.control.asstream.options import AsStreamOptions
from elasticity.control.signals import FloatArray

ROUND_OFF = 1e-9
"""A point counts as above the line only by more than this share of the latency scale: the
residuals of an exact fit are round-off, not bottlenecks."""


# ------------------------------------------------------------------ Eq. 4-5: the reference time T
def communication_time(work: float, bandwidth_in: float, bandwidth_out: float) -> float:
    """Eq. 4: T_comm = ½ (m / l_(i−1,i) + m / l_(i,i+1)), the mean time to move `work` in and out."""
    if bandwidth_in <= 0 or bandwidth_out <= 0:
        raise ValueError("link bandwidths must be positive")
    return 0.5 * (work / bandwidth_in + work / bandwidth_out)


@dataclass(frozen=True)
class StageCost:
    """One stage's (or task's) compute time T_calc (Eq. 3) and communication time T_comm (Eq. 4)."""

    compute_s: float
    communication_s: float


def reference_time(costs: Sequence[StageCost]) -> float:
    """Eq. 5: T = max(Σ T_calc, Σ T_comm) over all tasks; 0 for none (identification wants None then)."""
    return max(sum(c.compute_s for c in costs), sum(c.communication_s for c in costs), 0.0)


# ------------------------------------------------------------------ Eq. 6-8: the least-squares line
@dataclass(frozen=True)
class LatencyLine:
    """f(t) = slope · t + intercept (ω and b of Eq. 8), fitted to `points` samples; `mean_squared_error` is Eq. 6.

    The line passes through (t̄, γ̄) and is evaluated from there, with t̄ kept as the first
    sample's time plus the mean offset from it: with epoch-second timestamps, ω · t_i + b (or
    even t_i − t̄ with t̄ rounded to a float) would lose the milliseconds that f(t_i) depends on.
    """

    slope: float
    intercept: float
    points: int
    mean_squared_error: float
    origin_s: float
    mean_offset_s: float
    mean_latency_s: float

    @property
    def mean_time_s(self) -> float:
        return self.origin_s + self.mean_offset_s

    def at(self, times_s: FloatArray) -> FloatArray:
        return self.slope * ((times_s - self.origin_s) - self.mean_offset_s) + self.mean_latency_s


def fit_latency_line(times_s: FloatArray, latencies_s: FloatArray) -> LatencyLine | None:
    """Eq. 8's least-squares line through (t_i, γ_i); None without points (see the module docstring).

    The sums are taken about t̄ (Σ γ_i (t_i − t̄) / Σ (t_i − t̄)², the same ω as Eq. 8) so that
    epoch-second timestamps do not cancel catastrophically; b = γ̄ − ω t̄ is Eq. 8's b.
    """
    if times_s.shape != latencies_s.shape:
        raise ValueError(f"{times_s.size} times but {latencies_s.size} latencies")
    points = int(times_s.size)
    if points == 0:
        return None
    origin = float(times_s[0])
    offsets = times_s - origin  # exact for times close together (Sterbenz)
    mean_offset, mean_latency = float(offsets.mean()), float(latencies_s.mean())
    centered = offsets - mean_offset
    spread = float(np.dot(centered, centered))
    slope = float(np.dot(latencies_s, centered)) / spread if spread > 0 else 0.0
    residuals = slope * centered + mean_latency - latencies_s
    return LatencyLine(
        slope=slope,
        intercept=mean_latency - slope * (origin + mean_offset),
        points=points,
        mean_squared_error=float(np.mean(residuals * residuals)),
        origin_s=origin,
        mean_offset_s=mean_offset,
        mean_latency_s=mean_latency,
    )


# ------------------------------------------------------------------ step 5: effective bottleneck values
@dataclass(frozen=True)
class EffectiveBottleneckValue:
    """A sample above the line: its time, measured latency γ_i, the line's f(t_i), and the value used."""

    time_s: float
    latency_s: float
    fitted_s: float
    value_s: float


def effective_values(
    monitoring: StageMonitoring, line: LatencyLine | None, options: AsStreamOptions
) -> tuple[EffectiveBottleneckValue, ...]:
    """The samples whose latency lies above the fitted line, in time order."""
    if line is None:
        return ()
    times, latencies = monitoring.times_s, monitoring.latencies_s
    fitted = line.at(times)
    scale = max(1.0, float(np.max(np.abs(latencies))))
    above = latencies - fitted > ROUND_OFF * scale
    return tuple(
        EffectiveBottleneckValue(
            time_s=float(t),
            latency_s=float(g),
            fitted_s=float(f),
            value_s=float(f if options.bottleneck_value == "fitted" else g),
        )
        for t, g, f in zip(times[above], latencies[above], fitted[above])
    )


# ------------------------------------------------------------------ step 5-6: intervals and T_bottleneck
@dataclass(frozen=True)
class BottleneckInterval:
    """One bottleneck interval [start_s, end_s) with its effective values; T_bottleneck is their max."""

    start_s: float
    end_s: float
    values: tuple[EffectiveBottleneckValue, ...]
    counts: bool
    """It recurs (enough values) and is of the order of T: it enters the bottleneck level table."""

    @property
    def t_bottleneck_s(self) -> float:
        return max(v.value_s for v in self.values)

    @property
    def recurrences(self) -> int:
        return len(self.values)


def of_the_order_of(value_s: float, reference_s: float | None, factor: float) -> bool:
    """Whether value_s lies within `factor` of T either way; always true when T is unknown (None)."""
    if reference_s is None:
        return True
    return reference_s / factor <= value_s <= reference_s * factor


def bottleneck_intervals(
    values: Sequence[EffectiveBottleneckValue],
    period_start_s: float,
    reference_time_s: float | None,
    options: AsStreamOptions,
) -> tuple[BottleneckInterval, ...]:
    """Group the values into intervals [start + k·L, start + (k+1)·L); only intervals holding values."""
    length = options.bottleneck_interval_s
    groups: dict[int, list[EffectiveBottleneckValue]] = {}
    for value in values:
        groups.setdefault(math.floor((value.time_s - period_start_s) / length), []).append(value)
    intervals = []
    for index in sorted(groups):
        members = tuple(groups[index])
        peak = max(v.value_s for v in members)
        counts = len(members) >= options.min_recurrences and of_the_order_of(
            peak, reference_time_s, options.order_of_magnitude_factor
        )
        start = period_start_s + index * length
        intervals.append(BottleneckInterval(start, start + length, members, counts))
    return tuple(intervals)


# ------------------------------------------------------------------ step 6: levels and ranking
@dataclass(frozen=True)
class StageBottleneck:
    """One stage's identification: its line, intervals, bottleneck time (None: not in the table), level."""

    stage: str
    line: LatencyLine | None
    intervals: tuple[BottleneckInterval, ...]
    level: int

    @property
    def bottleneck_time_s(self) -> float | None:
        """The stage's entry in the level table: its largest counting T_bottleneck (None if none counts)."""
        counting = [i.t_bottleneck_s for i in self.intervals if i.counts]
        return max(counting) if counting else None

    @property
    def peak_t_bottleneck_s(self) -> float:
        """Largest T_bottleneck of any interval, counting or not (0 without effective values)."""
        return max((i.t_bottleneck_s for i in self.intervals), default=0.0)


@dataclass(frozen=True)
class BottleneckReport:
    """All stages, ranked: the bottleneck stage first (highest level, then highest T_bottleneck, then name)."""

    reference_time_s: float | None
    stages: tuple[StageBottleneck, ...]

    @property
    def ranking(self) -> tuple[str, ...]:
        return tuple(s.stage for s in self.stages)

    @property
    def bottleneck_stage(self) -> str | None:
        """The stage with the highest level; None when no stage has a level."""
        return self.stages[0].stage if self.stages and self.stages[0].level > 0 else None

    def level_of(self, stage: str) -> int:
        for found in self.stages:
            if found.stage == stage:
                return found.level
        raise KeyError(stage)


def identify_stage(
    monitoring: StageMonitoring, reference_time_s: float | None, options: AsStreamOptions
) -> StageBottleneck:
    """Steps 1–6 for one stage, before the level (set by `identify_bottlenecks` across stages)."""
    period = monitoring.within(options.monitoring_period_s)
    line = fit_latency_line(period.times_s, period.latencies_s)
    values = effective_values(period, line, options)
    start_s = period.samples[0].time_s if period.samples else 0.0
    return StageBottleneck(period.stage, line, bottleneck_intervals(values, start_s, reference_time_s, options), 0)


def identify_bottlenecks(
    monitorings: Sequence[StageMonitoring],
    options: AsStreamOptions,
    reference_time_s: float | None = None,
) -> BottleneckReport:
    """Identify every stage's bottleneck and level; `reference_time_s` is T of Eq. 5 (None: unknown).

    T must be positive: nothing is "of the order of" 0, so a T of 0 would silently give every
    stage level 0; a caller without a cost model passes None and the order test is skipped.
    """
    if reference_time_s is not None and not (reference_time_s > 0 and math.isfinite(reference_time_s)):
        raise ValueError(f"reference time T must be a positive number or None (unknown), got {reference_time_s}")
    by_stage(monitorings)  # raises when a stage is monitored twice
    found = [identify_stage(m, reference_time_s, options) for m in monitorings]
    table = {s.bottleneck_time_s for s in found if s.bottleneck_time_s is not None}
    leveled = [
        StageBottleneck(
            s.stage,
            s.line,
            s.intervals,
            0 if s.bottleneck_time_s is None else 1 + sum(v < s.bottleneck_time_s for v in table),
        )
        for s in found
    ]
    leveled.sort(key=lambda s: (-s.level, -s.peak_t_bottleneck_s, s.stage))
    return BottleneckReport(reference_time_s, tuple(leveled))
