"""Elasticity figures of a simulated run: settling, overshoot, oscillations, SLO attainment, cost.

`run_elasticity_benchmark` simulates the controller on a trace, finds the best static channel
count (the fewest channels whose static run meets the SLO, by binary search over simulated
static runs of the same trace and model), and `elasticity_figures` scores the elastic run per
load change: decisions to settle, overshoot, oscillations (direction reversals) in steady
phases, SLO attainment (share of seconds whose p99 probe latency across channels is within the
SLO) and channel-seconds relative to the best static choice. The result is a plain dict for JSON.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.repeats import spread
from elasticity.control.decision import Decision
from elasticity.control.options import ControlOptions
from elasticity.control.simulation import (
    LayoutKind,
    ProgressCallback,
    SimulationRun,
    StageModelOptions,
    simulate_elastic,
    simulate_static,
)
from elasticity.control.traces import Trace

StaticProgress = Callable[[int], None]


@dataclass(frozen=True)
class StaticChoice:
    """The best static channel count and its run (or the maximum if even that misses the SLO)."""

    channels: int
    slo_attainment: float
    meets_target: bool
    runs_simulated: int


def best_static_channels(
    trace: Trace,
    model_options: StageModelOptions,
    max_channels: int,
    slo_s: float,
    target_attainment: float,
    layout: LayoutKind = "uniform",
    on_run: StaticProgress | None = None,
) -> StaticChoice:
    """Fewest static channels whose run keeps p99 latency within the SLO for `target_attainment`
    of the seconds. Binary search: attainment grows with the channel count (fewer records per
    channel); the ceil(peak / service rate) lower bound skips hopeless counts."""
    runs = 0

    def attainment(channels: int) -> float:
        nonlocal runs
        runs += 1
        if on_run is not None:
            on_run(channels)
        return simulate_static(trace, model_options, channels, layout).slo_attainment(slo_s)

    low = max(1, min(max_channels, math.ceil(trace.peak_rps / model_options.service_rate_rps * 0.9)))
    high = max_channels
    top = attainment(high)
    if top < target_attainment:
        return StaticChoice(high, top, False, runs)
    best, best_attainment = high, top
    while low < high:
        middle = (low + high) // 2
        value = attainment(middle)
        if value >= target_attainment:
            best, best_attainment, high = middle, value, middle
        else:
            low = middle + 1
    return StaticChoice(best, best_attainment, True, runs)


def _reversals(deltas: list[int]) -> int:
    """Direction changes in a sequence of channel-count changes (+ then -, or - then +)."""
    signs = [1 if d > 0 else -1 for d in deltas if d != 0]
    return sum(1 for a, b in zip(signs, signs[1:], strict=False) if a != b)


def _overshoot(channels: np.ndarray, rising: bool) -> int:
    """Channels beyond the phase's final count in the direction of the move (SASO overshoot):
    above it after a rise, below it after a fall."""
    if channels.size == 0:
        return 0
    final = int(channels[-1])
    return max(0, int(channels.max()) - final) if rising else max(0, final - int(channels.min()))


def initial_channels_for(rate_rps: float, service_rate_rps: float, utilization: float, levels: tuple[int, ...]) -> int:
    """The level an operator would start at: the smallest one that carries `rate_rps` at `utilization`."""
    needed = rate_rps / (service_rate_rps * utilization)
    return next((count for count in levels if count >= needed), levels[-1])


def load_change_figures(
    run: SimulationRun, decisions: list[Decision], service_rate_rps: float, utilization: float
) -> list[dict[str, Any]]:
    """Per constant-rate phase of the trace: decisions, settle time, overshoot, reversals."""
    phases = run.trace.phases()
    figures: list[dict[str, Any]] = []
    for index, (start, end, rate) in enumerate(phases):
        in_phase = [d for d in decisions if start <= d.time_s - run.tick_s < end]
        mask = (run.times_s >= start) & (run.times_s < end)
        channels = run.channels[mask]
        final = int(channels[-1]) if channels.size else 0
        previous_rate = phases[index - 1][2] if index > 0 else 0.0
        figures.append(
            {
                "time_s": start,
                "duration_s": end - start,
                "rate_from_rps": previous_rate,
                "rate_to_rps": rate,
                "decisions_to_settle": len(in_phase),
                "settle_time_s": (in_phase[-1].time_s - start) if in_phase else 0.0,
                "overshoot_channels": _overshoot(channels, rising=rate >= previous_rate),
                "final_channels": final,
                "needed_channels": math.ceil(rate / (service_rate_rps * utilization)),
                "oscillations": _reversals([d.to_channels - d.from_channels for d in in_phase]),
                "slo_attainment": None,
                "rules": [d.rule for d in in_phase],
            }
        )
    return figures


def elasticity_figures(
    run: SimulationRun,
    static: StaticChoice,
    model_options: StageModelOptions,
    control_options: ControlOptions,
    slo_s: float,
    steady_min_s: float = 30.0,
) -> dict[str, Any]:
    """All figures of one elastic run against the best static choice, as a JSON-ready dict."""
    decisions = run.decisions
    phases = load_change_figures(
        run, decisions, model_options.service_rate_rps, control_options.controller.scale_out_utilization
    )
    for phase in phases:
        mask = (run.times_s >= phase["time_s"]) & (run.times_s < phase["time_s"] + phase["duration_s"])
        phase["slo_attainment"] = float(np.mean(run.p99_latency_s[mask] <= slo_s)) if mask.any() else None
    # The first phase starts from an arbitrary initial channel count, not from a load change.
    changes = phases[1:]
    steady = [p for p in phases if p["duration_s"] >= steady_min_s]
    static_channel_seconds = static.channels * run.trace.duration_s
    settle_counts = [p["decisions_to_settle"] for p in changes]
    return {
        "trace": run.trace.name,
        "duration_s": run.trace.duration_s,
        "peak_rate_rps": run.trace.peak_rps,
        "service_rate_rps": model_options.service_rate_rps,
        "max_channels": control_options.controller.max_channels,
        "slo_s": slo_s,
        "summary": {
            "load_changes": len(changes),
            "max_decisions_to_settle": max(settle_counts, default=0),
            "mean_decisions_to_settle": float(np.mean(settle_counts)) if settle_counts else 0.0,
            "max_overshoot_channels": max((p["overshoot_channels"] for p in changes), default=0),
            "oscillations_in_steady_phases": sum(p["oscillations"] for p in steady),
            "oscillations_total": sum(p["oscillations"] for p in phases),
            "slo_attainment": run.slo_attainment(slo_s),
            "rescale_decisions": len(decisions),
            "channel_seconds": run.channel_seconds,
            "best_static_channels": static.channels,
            "best_static_slo_attainment": static.slo_attainment,
            "best_static_meets_target": static.meets_target,
            "static_channel_seconds": static_channel_seconds,
            "channel_seconds_ratio": run.channel_seconds / static_channel_seconds,
            "max_p99_latency_s": float(run.p99_latency_s.max()),
            "simulation_wall_time_s": run.wall_time_s,
        },
        "load_changes": changes,
        "initial_phase": phases[0],
        "decisions": [d.model_dump(mode="json") for d in decisions],
        "series": {
            "time_s": run.times_s.tolist(),
            "input_rate_rps": run.input_rate_rps.tolist(),
            "channels": run.channels.astype(int).tolist(),
            "p99_latency_s": np.round(run.p99_latency_s, 4).tolist(),
        },
    }


def run_elasticity_benchmark(
    trace: Trace,
    model_options: StageModelOptions,
    control_options: ControlOptions,
    initial_channels: int,
    slo_s: float,
    static_target_attainment: float = 0.99,
    layout: LayoutKind = "uniform",
    progress: ProgressCallback | None = None,
    on_static_run: StaticProgress | None = None,
) -> tuple[dict[str, Any], SimulationRun, StaticChoice]:
    """Simulate elastic and static runs of one trace and return (figures, elastic run, static choice)."""
    started = time.perf_counter()
    run = simulate_elastic(trace, model_options, control_options, initial_channels, layout, progress)
    static = best_static_channels(
        trace,
        model_options,
        control_options.controller.max_channels,
        slo_s,
        static_target_attainment,
        layout,
        on_static_run,
    )
    figures = elasticity_figures(run, static, model_options, control_options, slo_s)
    figures["summary"]["static_target_attainment"] = static_target_attainment
    figures["summary"]["static_runs_simulated"] = static.runs_simulated
    figures["summary"]["total_wall_time_s"] = time.perf_counter() - started
    return figures, run, static


REPEATED_FIGURES = (
    "slo_attainment",
    "channel_seconds_ratio",
    "oscillations_in_steady_phases",
    "max_decisions_to_settle",
    "rescale_decisions",
    "max_p99_latency_s",
)
"""The summary figures `repeated_summary` reports with their median and spread."""


def repeated_summary(summaries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per figure of REPEATED_FIGURES over repeated runs: median, min, max and every run's value."""
    if not summaries:
        raise ValueError("no runs to summarize")
    out: dict[str, dict[str, Any]] = {}
    for name in REPEATED_FIGURES:
        out[name] = spread([float(s[name]) for s in summaries])
    return out


def median_run_index(summaries: list[dict[str, Any]]) -> int:
    """The run whose channel-seconds ratio is the median (the lower one of an even count: a real run)."""
    order = sorted(range(len(summaries)), key=lambda i: summaries[i]["channel_seconds_ratio"])
    return order[(len(order) - 1) // 2]
