"""Input-rate traces for the simulation and the elasticity benchmark: eSault, square, sine, step.

A `Trace` is a piecewise-constant rate (records/s) over time: segment start times and rates.
Step-shaped traces have few segments and their segment boundaries are the "load changes" the
benchmark scores; the sine trace is sampled once per second, so it has no steady phase.
The eSault trace reproduces the load of seed 000's (eSault's) experiment, scaled to a peak rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from elasticity.control.signals import FloatArray


@dataclass(frozen=True)
class Trace:
    name: str
    starts_s: FloatArray  # segment start times, ascending, first is 0
    rates_rps: FloatArray  # rate within each segment
    duration_s: float

    @classmethod
    def from_segments(cls, name: str, segments: Sequence[tuple[float, float]]) -> Trace:
        """Build from (duration_s, rate_rps) pairs, merging neighbours with the same rate."""
        if not segments:
            raise ValueError("a trace needs at least one segment")
        starts: list[float] = []
        rates: list[float] = []
        t = 0.0
        for duration, rate in segments:
            if duration <= 0 or rate < 0:
                raise ValueError(f"bad segment ({duration}, {rate})")
            if not rates or rates[-1] != rate:
                starts.append(t)
                rates.append(float(rate))
            t += duration
        return cls(name=name, starts_s=np.array(starts), rates_rps=np.array(rates), duration_s=t)

    def rate_at(self, times_s: float | FloatArray) -> FloatArray:
        """Rate at the given times (vectorized)."""
        index = np.searchsorted(self.starts_s, np.asarray(times_s, dtype=np.float64), side="right") - 1
        return self.rates_rps[np.clip(index, 0, self.rates_rps.size - 1)]

    @property
    def change_points_s(self) -> list[float]:
        """Times at which the rate changes (the load changes the benchmark scores)."""
        return [float(t) for t in self.starts_s[1:]]

    @property
    def peak_rps(self) -> float:
        return float(self.rates_rps.max())

    @property
    def longest_peak_hold_s(self) -> float:
        """The longest stretch spent at the peak rate: what a static channel count must survive."""
        return max(end - start for start, end, rate in self.phases() if rate == self.peak_rps)

    def phases(self) -> list[tuple[float, float, float]]:
        """(start, end, rate) of every constant-rate segment."""
        ends = np.append(self.starts_s[1:], self.duration_s)
        return [(float(s), float(e), float(r)) for s, e, r in zip(self.starts_s, ends, self.rates_rps, strict=True)]


def esault_trace(peak_rps: float, cycles: int = 2, valley_fraction: float = 0.05, warmup_s: float = 20.0) -> Trace:
    """Seed 000's trace: rise in 3 steps every 10 s to the peak, hold ~70 s, fall in 3 steps every
    20 s, hold ~70 s at the valley; `cycles` times (~230 s each), after a warm-up at the valley.

    The paper rises by ~50k tuples/s per step from near zero to ~150k; here a step is a third of
    the peak and the valley is `valley_fraction` of the peak (not zero, so there is throughput
    to measure). The peak hold counts from the last rising step (80 s incl. the 10 s step).
    """
    valley = peak_rps * valley_fraction
    cycle = [
        (10.0, peak_rps / 3),
        (10.0, peak_rps * 2 / 3),
        (80.0, peak_rps),
        (20.0, peak_rps * 2 / 3),
        (20.0, peak_rps / 3),
        (90.0, valley),
    ]
    return Trace.from_segments("esault", [(warmup_s, valley), *cycle * cycles])


def square_trace(low_rps: float, high_rps: float, period_s: float = 120.0, cycles: int = 3) -> Trace:
    """Low for half a period, high for the other half."""
    half = period_s / 2
    return Trace.from_segments("square", [(half, low_rps), (half, high_rps)] * cycles)


def sine_trace(mean_rps: float, amplitude_rps: float, period_s: float = 200.0, cycles: int = 2) -> Trace:
    """mean + amplitude * sin(2 pi t / period), held constant within each second."""
    if amplitude_rps > mean_rps:
        raise ValueError("amplitude above the mean would make the rate negative")
    seconds = np.arange(int(period_s * cycles))
    rates = mean_rps + amplitude_rps * np.sin(2 * np.pi * seconds / period_s)
    return Trace.from_segments("sine", [(1.0, float(r)) for r in rates])


def step_trace(low_rps: float, high_rps: float, step_at_s: float = 30.0, duration_s: float = 120.0) -> Trace:
    """Low until `step_at_s`, then high."""
    if not 0 < step_at_s < duration_s:
        raise ValueError("the step must fall inside the trace")
    return Trace.from_segments("step", [(step_at_s, low_rps), (duration_s - step_at_s, high_rps)])


def trace_by_name(name: str, peak_rps: float) -> Trace:
    """The benchmark's traces scaled to one peak rate."""
    builders = {
        "esault": lambda: esault_trace(peak_rps),
        "square": lambda: square_trace(peak_rps * 0.2, peak_rps),
        "sine": lambda: sine_trace(peak_rps * 0.55, peak_rps * 0.45),
        "step": lambda: step_trace(peak_rps * 0.2, peak_rps),
    }
    if name not in builders:
        raise ValueError(f"unknown trace {name!r}; choose one of {sorted(builders)}")
    return builders[name]()
