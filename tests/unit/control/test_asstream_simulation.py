"""The chain model of a two-stage micro-batch job under the real `StagesLoop` (seed 002's claims at
the model level, noise-free enough to assert): As-Stream scales the downstream bottleneck out at the
first tick after each rise of the load, before the job is congested, and spends fewer
channel-seconds than scaling every stage together at an SLO attainment at least as high; the
reactive policy only moves once the job is congested. Plus the model's own arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from elasticity.control.asstream import StagesOptions
from elasticity.control.asstream.options import AsStreamOptions
from elasticity.control.asstream.simulation import ChainModel, ChainModelOptions, ChainRun, ChainStage, simulate_chain
from elasticity.control.options import CongestionOptions, ControllerOptions, ControlOptions, OverloadOptions
from elasticity.control.traces import square_trace

SLO_S = 15.0
TICK_S = 5.0
TRACE = square_trace(50.0, 200.0, period_s=120.0, cycles=2)  # rises at 60 s and 180 s
RISES_S = (60.0, 180.0)
CONTROL = ControlOptions(
    overload=OverloadOptions(max_latency_s=SLO_S, reaction_time=3, reaction_factor=0.5),
    congestion=CongestionOptions(window=3, growth_tolerance_s=3.75, max_lag_s=2 * SLO_S, max_drain_s=SLO_S),
    controller=ControllerOptions(max_channels=6, cooldown_s=TICK_S),
)


def _model(seed: int = 0) -> ChainModelOptions:
    return ChainModelOptions(
        stages=(ChainStage(name="main", service_rate_rps=1000.0), ChainStage(name="buckets", service_rate_rps=125.0)),
        tick_s=TICK_S,
        seed=seed,
    )


def _run(policy: str, seed: int = 0) -> ChainRun:
    options = StagesOptions(policy=policy, asstream=AsStreamOptions(max_channels=6, monitoring_period_s=30.0))
    return simulate_chain(TRACE, _model(seed), options, CONTROL)


def _channel_seconds(run: ChainRun) -> float:
    return float(sum(series.sum() for series in run.channels.values()) * TICK_S)


def _slo_attainment(run: ChainRun) -> float:
    return float(np.mean(run.latency_s <= SLO_S))


def _first_scale_out_after(run: ChainRun, rise_s: float):
    return next(
        d
        for d in run.decisions
        if d.stage == "buckets" and d.decision.time_s > rise_s and d.decision.to_channels > d.decision.from_channels
    )


def _congested_at(run: ChainRun, time_s: float) -> bool:
    return run.congested[int(round(time_s / TICK_S)) - 1]


def test_the_job_rate_is_the_inverse_of_the_stages_summed_costs() -> None:
    model = ChainModel(_model())
    # 1 row costs 1/1000 s on main's 1 channel and 1/125 s on buckets' 1: R = 0.7 / 0.009 records/s.
    assert model.job_rate_rps() == pytest.approx(0.7 / (1 / 1000 + 1 / 125))
    model.channels = [1, 4]
    assert model.job_rate_rps() == pytest.approx(0.7 / (1 / 1000 + 1 / 500))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_as_stream_scales_the_downstream_stage_out_ahead_of_congestion_at_every_rise(seed: int) -> None:
    run = _run("as-stream", seed)
    for rise_s in RISES_S:
        first = _first_scale_out_after(run, rise_s)
        assert first.decision.rule == "as-stream-predict"
        assert first.decision.time_s == rise_s + TICK_S  # the first tick that saw the new arrival rate
        assert not _congested_at(run, first.decision.time_s)
    assert _slo_attainment(run) >= 0.95


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_as_stream_spends_fewer_channel_seconds_than_scaling_together_at_no_worse_slo(seed: int) -> None:
    as_stream, together = _run("as-stream", seed), _run("together", seed)
    assert _channel_seconds(as_stream) < 0.8 * _channel_seconds(together)
    assert _slo_attainment(as_stream) >= _slo_attainment(together)


def test_the_reactive_policy_moves_only_once_the_job_is_congested() -> None:
    run = _run("reactive")
    for rise_s in RISES_S:
        first = _first_scale_out_after(run, rise_s)
        assert first.decision.rule == "reactive" and _congested_at(run, first.decision.time_s)
    assert _slo_attainment(run) < _slo_attainment(_run("as-stream"))
