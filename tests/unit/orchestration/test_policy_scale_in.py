"""The sensor policy's scale-in after a fall in steps (eSault's): sized for the input of the last
two periods, not for the previous step still in the detector windows."""

from __future__ import annotations

from elasticity.control.controller import ControllerState, ScalingController
from elasticity.control.detectors import evaluate
from orchestration.elasticity.policy import ElasticityPolicy
from tests.fakes.control import make_snapshot


def scale_in_after(inputs: list[float], channels: int = 8, capacity_rps: float = 130.0) -> int:
    """The count P2 chooses at the last of these 5 s periods (stage keeping up, capacity known)."""
    options = ElasticityPolicy(slo_s=15.0, sample_period_s=5.0).control_options()
    controller = ScalingController(options.controller)
    state = ControllerState(channel_capacity_rps=capacity_rps, capacity_samples_rps=[capacity_rps])
    windows, decision = None, None
    for period, rate in enumerate(inputs):
        snapshot = make_snapshot(
            5.0 * period, [2.0] * channels, [rate / channels] * channels, input_rate_rps=rate, lag=rate * 2.0
        )
        windows, evaluation = evaluate(windows, snapshot, options)
        state, decision = controller.decide(state, evaluation, 5.0 * period)
    assert decision is not None and decision.action == "scale_in", decision
    return decision.to_channels


def test_a_fall_in_steps_scales_in_once_two_periods_show_the_new_step():
    # The eSault fall at its 5 s ticks: 800 records/s, then 537 (two seconds of input behind,
    # drained in 20 s). The whole window (four periods) still held 800 two periods into the step
    # (800 / (130 x 0.8) + 0.6 = 8.3: hold at 8); the last two hold 537 -> 5.2 + 0.4 -> 6 channels.
    assert scale_in_after([800.0] * 4 + [537.0] * 2) == 6
