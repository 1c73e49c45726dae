"""`esp bench multistage --simulate`: the same three policies on the chain model
(`elasticity.control.asstream.simulation`) instead of the real stack, in seconds: the loop and the
policies are the production ones, only the collector and realizer are the model's. The model's
costs are the real run's knobs (`--main-ms`, `--downstream-ms`), its ticks the loop's period."""

from __future__ import annotations

import numpy as np

from benchmarks.multistage import DOWNSTREAM, FIRST, MultistageOptions, PolicyRun, bench_policy, stages_options
from benchmarks.multistage_figures import StageRescaleAt, TickAt, policy_figures


def chain_options(options: MultistageOptions, seed: int):
    """The model of the benchmark's two-stage job (stage main passes every row on)."""
    from elasticity.control.asstream.simulation import ChainModelOptions, ChainStage

    def rate(ms: float) -> float:
        return 1000.0 / ms if ms > 0 else 1e9

    return ChainModelOptions(
        stages=(
            ChainStage(name=FIRST, service_rate_rps=rate(options.main_ms)),
            ChainStage(name=DOWNSTREAM, service_rate_rps=rate(options.downstream_ms)),
        ),
        tick_s=options.interval_s,
        seed=seed,
    )


def per_second(series: np.ndarray, tick_s: float, seconds: int) -> np.ndarray:
    """A per-tick series as one value per second: each second takes the tick it starts in (the
    last tick for seconds beyond the series)."""
    ticks = np.minimum((np.arange(seconds) / tick_s).astype(int), len(series) - 1)
    return np.asarray(series)[ticks]


def simulate_policy(policy_name: str, options: MultistageOptions, seed: int) -> PolicyRun:
    """One policy on the model under the benchmark's square trace; figures as the real run's."""
    from elasticity.control.asstream.simulation import simulate_chain
    from elasticity.control.traces import square_trace

    cycles = int(np.ceil(options.duration_s / options.period_s))
    trace = square_trace(options.low_rps, options.high_rps, options.period_s, cycles)
    policy = bench_policy(options)
    model = chain_options(options, seed)
    run = simulate_chain(trace, model, stages_options(policy_name, options), policy.control_options())
    seconds = int(options.duration_s)

    def seconds_of(series: np.ndarray) -> np.ndarray:
        return per_second(series, model.tick_s, seconds)

    channels = {stage: seconds_of(series) for stage, series in run.channels.items()}
    target = trace.rate_at(np.arange(seconds, dtype=float))
    rescales = [
        StageRescaleAt(d.decision.time_s, d.stage, d.decision.from_channels, d.decision.to_channels, d.decision.rule)
        for d in run.decisions
    ]
    ticks = [TickAt(t + model.tick_s, congested) for t, congested in zip(run.times_s, run.congested)]
    figures = policy_figures(target, channels, seconds_of(run.latency_s), options.slo_s, rescales, ticks, DOWNSTREAM)
    figures.update(
        {
            "policy": policy_name,
            "stack": "chain model (elasticity.control.asstream.simulation) + StagesLoop",
            "seed": seed,
            "rescales": [r.__dict__ for r in rescales],
            "reasons": [f"{d.stage}: {d.decision.reason}" for d in run.decisions],
        }
    )
    return PolicyRun(policy_name, target, seconds_of(run.input_rate_rps), channels, seconds_of(run.latency_s), figures)
