"""Rate profiles of `esp load`: the eSault trace's shape, scaling by peak, time compression, cuts."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.load import LoadSpec, rate_profile
from pipelines.load.profiles import ESAULT_CYCLE_S


def esault_phases(peak: float = 30_000.0, **overrides):
    profile = rate_profile(LoadSpec(profile="esault", peak_rate=peak, **overrides))
    return profile, profile.trace.phases()


def test_esault_rises_every_10s_holds_falls_every_20s_and_holds_twice():
    profile, phases = esault_phases()
    rates = [r for _, _, r in phases]
    lengths = [e - s for s, e, _ in phases]
    peak, valley = 30_000.0, 30_000.0 * 0.05
    assert rates[0] == valley  # warm-up at the valley
    for cycle in range(2):
        c = 1 + 6 * cycle
        rising, top, falling, bottom = rates[c : c + 2], rates[c + 2], rates[c + 3 : c + 5], rates[c + 5]
        assert rising == sorted(rising) and rising[0] > valley and rising[-1] < peak
        assert lengths[c : c + 2] == [10.0, 10.0]  # a rising step every 10 s
        assert top == peak and lengths[c + 2] >= 70.0  # holds the peak ~70 s
        assert falling == sorted(falling, reverse=True) and falling[-1] > valley
        assert lengths[c + 3 : c + 5] == [20.0, 20.0]  # a falling step every 20 s
        assert bottom == valley and lengths[c + 5] >= 70.0  # holds the valley ~70 s
    assert len(phases) == 13  # warm-up + two cycles of six phases
    assert 220.0 <= ESAULT_CYCLE_S <= 260.0
    assert profile.duration_s == pytest.approx(20.0 + 2 * ESAULT_CYCLE_S)


@pytest.mark.parametrize("peak", [100.0, 20_000.0, 150_000.0])
def test_peak_argument_scales_every_profile(peak):
    for name in ("constant", "step", "square", "sine", "esault"):
        profile = rate_profile(LoadSpec(profile=name, peak_rate=peak))
        assert profile.peak_rps == pytest.approx(peak, rel=0.01), name
        assert float(profile.rate_at(np.linspace(0, profile.duration_s - 1e-6, 500)).max()) <= peak * (1 + 1e-9)


def test_base_rate_sets_the_low_phases():
    profile = rate_profile(LoadSpec(profile="square", peak_rate=1000, base_rate=250, period_s=10))
    assert sorted({r for _, _, r in profile.trace.phases()}) == [250.0, 1000.0]
    with pytest.raises(ValueError):
        LoadSpec(peak_rate=100, base_rate=200)


def test_speed_compresses_time_not_rate():
    slow, _ = esault_phases()
    fast, _ = esault_phases(speed=10.0)
    assert fast.duration_s == pytest.approx(slow.duration_s / 10)
    assert fast.peak_rps == slow.peak_rps
    assert fast.trace.change_points_s == pytest.approx([t / 10 for t in slow.trace.change_points_s])
    assert fast.total_records == pytest.approx(slow.total_records / 10, rel=1e-6)


def test_duration_cuts_or_extends_the_profile():
    short = rate_profile(LoadSpec(profile="esault", peak_rate=1000, duration_s=60))
    assert short.duration_s == 60.0
    assert short.rate_at(60.0) == 0.0 and short.rate_at(59.9) == 1000.0
    long = rate_profile(LoadSpec(profile="esault", peak_rate=1000, duration_s=800))
    peaks = [start for start, _, rate in long.trace.phases() if rate == 1000.0]
    assert len(peaks) == 4  # 800 s of profile time needs four eSault cycles
    square = rate_profile(LoadSpec(profile="square", peak_rate=10, period_s=10, duration_s=95))
    assert square.duration_s == 95.0 and square.trace.duration_s >= 95.0


def test_records_due_is_the_integral_of_the_rate():
    profile = rate_profile(LoadSpec(profile="step", peak_rate=100, base_rate=10, step_at_s=5, duration_s=10))
    assert float(profile.records_due(5.0)) == pytest.approx(50.0)
    assert float(profile.records_due(7.5)) == pytest.approx(50.0 + 250.0)
    assert profile.total_records == 550
    assert float(profile.records_due(100.0)) == pytest.approx(550.0)  # clamped at the end
    seconds = profile.per_second_targets()
    assert seconds.tolist() == [10.0] * 5 + [100.0] * 5


def test_sine_stays_between_base_and_peak_and_has_no_steady_phase():
    profile = rate_profile(LoadSpec(profile="sine", peak_rate=1000, base_rate=200, period_s=40))
    rates = profile.rate_at(np.arange(0, profile.duration_s, 0.5))
    assert rates.min() >= 200 - 1e-6 and rates.max() <= 1000 + 1e-6
    assert len(profile.trace.phases()) > 40


def test_scaled_profile_carries_a_share_of_the_rate():
    profile = rate_profile(LoadSpec(profile="esault", peak_rate=9000))
    third = profile.scaled(1 / 3)
    assert third.peak_rps == pytest.approx(3000)
    assert third.total_records * 3 == pytest.approx(profile.total_records, abs=3)
