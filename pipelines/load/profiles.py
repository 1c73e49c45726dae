"""Target-rate profiles of a load: the elasticity traces (eSault, square, sine, step) plus constant,
scaled to a peak rate, time-compressed by a speed factor and cut to the run's duration.

The shapes come from `elasticity.control.traces` (the same traces the controller is benchmarked
on); this module only adds the constant profile, time compression, and the cumulative target
count the producer paces against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from elasticity.control.traces import Trace, esault_trace, sine_trace, square_trace, step_trace
from pipelines.load.spec import LoadSpec

# Length of one eSault cycle in `esault_trace` (10 + 10 + 80 + 20 + 20 + 90 s).
ESAULT_CYCLE_S = 230.0
CONSTANT_DEFAULT_S = 60.0
STEP_DEFAULT_S = 120.0


@dataclass(frozen=True)
class RateProfile:
    """A piecewise-constant target rate over wall-clock time [0, duration_s)."""

    trace: Trace
    duration_s: float

    @property
    def name(self) -> str:
        return self.trace.name

    @property
    def peak_rps(self) -> float:
        return float(max(r for s, _, r in self.trace.phases() if s < self.duration_s))

    def rate_at(self, t_s: float | np.ndarray) -> np.ndarray:
        """Target rate at wall time t (0 outside [0, duration))."""
        t = np.asarray(t_s, dtype=np.float64)
        return np.where((t >= 0) & (t < self.duration_s), self.trace.rate_at(t), 0.0)

    def records_due(self, t_s: float | np.ndarray) -> np.ndarray:
        """Records the profile asks for over [0, t]: the integral of the rate (vectorized)."""
        t = np.clip(np.asarray(t_s, dtype=np.float64), 0.0, self.duration_s)
        starts = self.trace.starts_s
        ends = np.append(starts[1:], np.inf)
        overlap = np.clip(np.minimum(t[..., None], ends) - starts, 0.0, None)
        return overlap @ self.trace.rates_rps

    @property
    def total_records(self) -> int:
        """Records in the whole run (the integral over the duration, rounded down)."""
        return int(math.floor(float(self.records_due(self.duration_s)) + 1e-9))

    def per_second_targets(self) -> np.ndarray:
        """Target records in each wall-clock second of the run (the last one may be partial)."""
        edges = np.append(np.arange(0.0, self.duration_s, 1.0), self.duration_s)
        return np.diff(self.records_due(edges))

    def scaled(self, share: float) -> RateProfile:
        """The same shape carrying `share` of the rate (one producer process's part)."""
        trace = Trace(self.trace.name, self.trace.starts_s, self.trace.rates_rps * share, self.trace.duration_s)
        return RateProfile(trace, self.duration_s)


def compress(trace: Trace, speed: float) -> Trace:
    """The trace played `speed` times faster: same rates, shorter segments."""
    return Trace(trace.name, trace.starts_s / speed, trace.rates_rps.copy(), trace.duration_s / speed)


def constant_trace(rate_rps: float, duration_s: float) -> Trace:
    return Trace.from_segments("constant", [(duration_s, rate_rps)])


def _cycles_for(profile_time_s: float | None, cycle_s: float, default: int) -> int:
    """Enough cycles to cover the requested profile time (the run cuts the rest)."""
    if profile_time_s is None:
        return default
    return max(1, math.ceil(profile_time_s / cycle_s - 1e-9))


def build_trace(spec: LoadSpec) -> Trace:
    """The profile's trace in profile time (before compression), long enough for the duration."""
    peak, base = spec.peak_rate, spec.effective_base_rate
    wanted = spec.duration_s * spec.speed if spec.duration_s is not None else None
    if spec.profile == "constant":
        return constant_trace(peak, wanted or CONSTANT_DEFAULT_S)
    if spec.profile == "step":
        return step_trace(base, peak, step_at_s=spec.step_at_s, duration_s=wanted or STEP_DEFAULT_S)
    if spec.profile == "square":
        return square_trace(base, peak, period_s=spec.period_s, cycles=_cycles_for(wanted, spec.period_s, 3))
    if spec.profile == "sine":
        mean, amplitude = (peak + base) / 2, (peak - base) / 2
        return sine_trace(mean, amplitude, period_s=spec.period_s, cycles=_cycles_for(wanted, spec.period_s, 2))
    if spec.profile == "esault":
        cycle_time = None if wanted is None else max(0.0, wanted - spec.esault_warmup_s)
        cycles = _cycles_for(cycle_time, ESAULT_CYCLE_S, spec.esault_cycles) if wanted else spec.esault_cycles
        valley_share = base / peak
        return esault_trace(peak, cycles=cycles, valley_fraction=valley_share, warmup_s=spec.esault_warmup_s)
    raise ValueError(f"unknown profile {spec.profile!r}")


def rate_profile(spec: LoadSpec) -> RateProfile:
    """The wall-clock target rate of a run: the trace, compressed by `speed`, cut to `duration_s`."""
    trace = compress(build_trace(spec), spec.speed)
    duration = spec.duration_s if spec.duration_s is not None else trace.duration_s
    return RateProfile(trace, duration)
