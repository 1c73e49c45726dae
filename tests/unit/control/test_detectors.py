"""eSault overload/underload and lag congestion on scripted windows."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from elasticity.control.detectors import (
    SignalWindows,
    batch_overhead_share,
    busy_time_rate,
    congestion_signal,
    evaluate,
    late_share,
    overload_flags,
    saturated_period,
    sustainable_rate,
    update_peaks,
)
from elasticity.control.options import CongestionOptions, ControlOptions, OverloadOptions, UnderloadOptions
from elasticity.control.signals import CommittedLayout, MetricsSnapshot
from tests.fakes.control import make_snapshot

OPTIONS = ControlOptions(
    overload=OverloadOptions(max_latency_s=1.0, reaction_time=4, reaction_factor=0.5),
    underload=UnderloadOptions(low_watermark=0.5, reaction_time=4, reaction_factor=0.5, peak_reset_rise_factor=1.5),
    congestion=CongestionOptions(window=3, max_lag_s=2.0, threshold=0.6, growth_tolerance_s=0.05),
)
STREAM_CONGESTION = OPTIONS.congestion.model_copy(
    update={"growth_tolerance_s": 3.75, "max_lag_s": 30.0, "max_drain_s": 15.0}
)
"""Congestion as the sensor policy sets it for a stream with a 15 s SLO."""


def run_each(snapshots, options: ControlOptions = OPTIONS):
    """The windows after the last snapshot, and every snapshot's evaluation."""
    windows, evaluations = None, []
    for snapshot in snapshots:
        windows, ev = evaluate(windows, snapshot, options)
        evaluations.append(ev)
    return windows, evaluations


def run(snapshots):
    """The windows and the evaluation after the last snapshot."""
    windows, evaluations = run_each(snapshots)
    return windows, evaluations[-1]


def test_late_share_counts_slow_and_timed_out_probes():
    latency = np.array([[0.5, 2.0], [0.5, 0.5], [1.5, 0.5], [0.5, 0.5]])
    timeouts = np.array([[False, False], [True, False], [False, False], [False, False]])
    np.testing.assert_allclose(late_share(latency, timeouts, 1.0), [0.5, 0.25])


def test_overload_needs_the_share_of_late_probes_to_exceed_the_factor():
    options = OverloadOptions(reaction_time=4, reaction_factor=0.5)
    # Exactly half late is not "exceeds"; three quarters is.
    assert list(overload_flags(np.array([0.5, 0.75]), 4, options)) == [False, True]
    # Not before the window is full.
    assert not overload_flags(np.array([1.0]), 3, options).any()


def test_evaluate_flags_only_the_slow_channel_as_overloaded():
    snapshots = [make_snapshot(t, [0.1, 2.0 + t, 0.1]) for t in range(4)]
    _, ev = run(snapshots)
    assert ev.ready_up
    assert ev.overloaded_channels == [1]


def test_a_channel_whose_latency_is_draining_is_not_overloaded():
    # Late in every period but falling fast: catching up after a rescale, do not split it again.
    snapshots = [make_snapshot(t, [0.1, 8.0 - 2 * t]) for t in range(4)]
    _, ev = run(snapshots)
    assert ev.late_share[1] == 1.0
    assert ev.overloaded_channels == []


def test_underload_when_throughput_stays_below_the_watermark_of_the_peak():
    high = [make_snapshot(t, [0.1, 0.1], [100.0, 100.0]) for t in range(3)]
    low = [make_snapshot(3 + t, [0.1, 0.1], [100.0, 30.0]) for t in range(4)]
    _, ev = run(high + low)
    assert ev.underloaded_channels == [1]


def test_no_underload_if_a_probe_timed_out_in_the_overload_window():
    high = [make_snapshot(t, [0.1, 0.1], [100.0, 100.0]) for t in range(3)]
    low = [make_snapshot(3 + t, [0.1, 0.1], [100.0, 30.0]) for t in range(4)]
    low[-1] = make_snapshot(6, [0.1, 9.0], [100.0, 30.0], timed_out=[False, True])
    _, ev = run(high + low)
    assert ev.underloaded_channels == []


def test_peaks_reset_on_a_clear_rise_and_on_a_timeout():
    options = UnderloadOptions(peak_reset_rise_factor=1.5)
    peaks = np.array([100.0, 100.0])
    kept, reset = update_peaks(peaks, np.array([120.0, 50.0]), False, options)
    assert not reset and list(kept) == [120.0, 100.0]
    risen, reset = update_peaks(peaks, np.array([200.0, 50.0]), False, options)
    assert reset and list(risen) == [200.0, 50.0]
    timed, reset = update_peaks(peaks, np.array([80.0, 50.0]), True, options)
    assert reset and list(timed) == [80.0, 50.0]


def test_light_periods_before_a_peak_reset_are_forgotten():
    # Channel 1 was light for 3 periods, then a clear rise on channel 0 resets every peak:
    # the old light periods were judged against stale peaks and must not make it underloaded.
    high = [make_snapshot(t, [0.1, 0.1], [100.0, 100.0]) for t in range(2)]
    light = [make_snapshot(2 + t, [0.1, 0.1], [100.0, 30.0]) for t in range(3)]
    rise = [make_snapshot(5, [0.1, 0.1], [400.0, 30.0])]
    windows, ev = run(high + light + rise)
    assert windows.periods_since_peak_reset == 1
    assert ev.underloaded_channels == []


def test_congestion_when_lag_grows():
    options = OPTIONS.congestion
    signal = congestion_signal(np.array([0.0, 500.0, 1000.0]), 1000.0, options)
    assert signal.growth_share == 1.0 and signal.congested and 0.0 <= signal.index <= 1.0


def test_congestion_when_flat_lag_exceeds_the_bound_in_seconds_of_input():
    options = OPTIONS.congestion
    assert congestion_signal(np.array([2500.0, 2500.0, 2500.0]), 1000.0, options).congested
    assert not congestion_signal(np.array([1500.0, 1500.0, 1500.0]), 1000.0, options).congested


def test_a_backlog_after_the_input_fell_is_measured_in_seconds_of_the_stages_work():
    # The square trace's valley on the real stack: 6,100 records behind, 163 rec/s arriving (37 s
    # of input: over a max_lag_s of 30) while the stage does 790 (7.7 s of its work).
    options = STREAM_CONGESTION
    lags = np.array([5900.0, 6300.0, 6100.0])
    assert congestion_signal(lags, 163.0, options).congested  # throughput unknown: seconds of input
    signal = congestion_signal(lags, 163.0, options, 790.0)
    assert not signal.congested, signal
    # Behind at the peak, the stage slower than the input: still seconds of input, still congestion.
    assert congestion_signal(np.array([36000.0, 36500.0, 37000.0]), 1000.0, options, 990.0).congested


def test_draining_lag_is_not_congestion_even_above_the_bound():
    signal = congestion_signal(np.array([9000.0, 6000.0, 3000.0]), 1000.0, OPTIONS.congestion)
    assert signal.draining and not signal.congested


def test_noise_below_the_growth_tolerance_is_not_growth():
    signal = congestion_signal(np.array([10.0, 40.0, 70.0]), 1000.0, OPTIONS.congestion)
    assert signal.growth_share == 0.0 and not signal.congested


def test_windows_restart_on_layout_change_and_round_trip_through_json():
    windows, _ = run([make_snapshot(t, [0.1, 0.2]) for t in range(5)])
    restored = SignalWindows.from_dict(windows.to_dict(), OPTIONS)
    for name in ("latency", "timed_out", "throughput", "light", "lag", "input_rate", "peaks"):
        np.testing.assert_array_equal(getattr(restored, name), getattr(windows, name))
    assert restored.periods_seen == windows.periods_seen
    after, ev = evaluate(restored, make_snapshot(5, [0.1, 0.2], layout_epoch=1), OPTIONS)
    # The new layout's first period holds the end of the rescale's pause: masked, not counted.
    assert after.periods_seen == 0 and ev.settling and not ev.ready_up
    after, ev = evaluate(after, make_snapshot(6, [0.1, 0.2], layout_epoch=1), OPTIONS)
    assert after.periods_seen == 1 and not ev.settling and not ev.ready_up and ev.periods_judged == 1


def test_a_lag_the_stage_cannot_drain_within_max_drain_s_is_congestion_although_input_rises():
    # The shape of a rising load on one saturated channel: the lag grows by less than the
    # growth tolerance (which scales with the input rate) and stays under max_lag_s of input.
    options = STREAM_CONGESTION
    lags = np.array([109.0, 1348.0, 2741.0])
    assert not congestion_signal(lags, 382.0, options.model_copy(update={"max_drain_s": None}), 132.0).congested
    signal = congestion_signal(lags, 382.0, options, 132.0)
    assert signal.congested and signal.drain_s == 2741.0 / 132.0


def test_drain_time_within_the_bound_small_lags_and_draining_lags_are_not_congestion():
    options = STREAM_CONGESTION
    assert not congestion_signal(np.array([900.0, 1000.0, 1000.0]), 200.0, options, 200.0).congested  # 5 s to drain
    # Within the sawtooth of a batch: nothing processed this period, yet no congestion.
    assert not congestion_signal(np.array([100.0, 110.0, 120.0]), 40.0, options, 0.0).congested
    assert not congestion_signal(np.array([20000.0, 15000.0, 9000.0]), 800.0, options, 500.0).congested  # draining


# ------------------------------------------------------------------ a rescale's pause and settling
def after_a_rescale(pause_periods: int, then: int, options: ControlOptions = OPTIONS):
    """Two channels at epoch 0 for 4 periods, then epoch 1: `pause_periods` with nothing processed
    (lag growing), then `then` periods processing; returns the evaluations of epoch 1."""
    windows, _ = run([make_snapshot(t, [0.1, 0.1], [500.0, 500.0], lag=100.0) for t in range(4)])
    evaluations = []
    for i in range(pause_periods + then):
        paused = i < pause_periods
        snapshot = make_snapshot(
            4 + i, [2.0 + i, 2.0 + i], [0.0, 0.0] if paused else [900.0, 900.0], lag=1000.0 * (i + 1), layout_epoch=1
        )
        windows, ev = evaluate(windows, snapshot, options)
        evaluations.append(ev)
    return windows, evaluations


def test_a_rescales_pause_and_the_settling_after_it_do_not_enter_the_windows():
    # The old layout's last period ended at t=3; nothing was processed at t=4..8 (5 s); with the
    # default settle_pause_factor of 1, the first resumed period (t=9) and 5 s after it are settling.
    windows, evs = after_a_rescale(pause_periods=5, then=10)
    settling = [ev.settling for ev in evs]
    assert settling == [True] * 11 + [False] * 4
    assert all(not ev.ready_up and not ev.ready_down for ev in evs[:11])
    assert evs[-1].rescale_pause_s == 5.0
    # Only the four periods after the settling were pushed; none of the idle ones.
    assert windows.periods_seen == 4 and windows.throughput.min() == 900.0
    assert SignalWindows.from_dict(windows.to_dict(), OPTIONS).settle_until_s == windows.settle_until_s


def test_the_first_period_after_a_rescales_settling_is_judged_for_saturation():
    # Its start is the last settling period's snapshot (t=14): the lag there, 11,000 records, is
    # the broker's count, true although the period was masked. 1,800 records processed in the
    # period with 11,000 -> 12,000 behind: a backlog throughout that did not shrink.
    windows, evs = after_a_rescale(pause_periods=5, then=7)
    first = evs[11]
    assert evs[10].settling and not first.settling and first.saturated and first.after_rescale
    assert SignalWindows.from_dict(windows.to_dict(), OPTIONS).last_lag_records == 12_000.0


@pytest.mark.parametrize(("input_rps", "outpaced"), [(795.0, True), (340.0, False)])
def test_a_period_behind_that_takes_in_more_than_it_processes_is_outpaced_whatever_the_busy_share(input_rps, outpaced):
    # The slow machine's 2 channels after 1 -> 2: 327 rec/s processed with a backlog throughout,
    # the tasks busy 60 % of the time (the driver's share of 8 s batches is the rest): not
    # saturated by the busy share. Taking in 795 rec/s, it is outpaced; at 340 (within the change
    # factor) it may be keeping up.
    windows, _ = run([make_snapshot(t, [2.0], [40.0], input_rate_rps=40.0, lag=150.0) for t in range(4)])
    for t, lag in [(4, 6_204.0), (9, 7_429.0)]:  # the settling period (masked), then the first judged one
        snapshot = make_snapshot(
            t, [10.0, 10.0], [163.5, 163.5], input_rate_rps=input_rps, lag=lag, layout_epoch=1, busy_share=[0.6, 0.6]
        )
        windows, ev = evaluate(windows, snapshot, OPTIONS)
    assert not ev.settling and ev.after_rescale and not ev.saturated and ev.outpaced == outpaced


@pytest.mark.parametrize(
    ("channels", "per_channel_rps", "busy_share", "cycle_s", "input_rps", "lags", "outpaced"),
    [
        (1, 31.0, 0.18, 4.17, 37.0, (194.0, 280.0), False),  # eSault's one channel after 4 -> 1 at 66cbdda
        (1, 31.0, None, None, 37.0, (194.0, 280.0), True),  # no busy time measured: nothing to guard with
        (2, 175.0, 0.70, 8.5, 806.0, (6_204.0, 8_000.0), True),  # eSault's 2 channels on a slow machine
    ],
    ids=["trickle", "trickle-unmeasured", "outgrown"],
)
def test_a_trickle_within_what_its_channels_sustain_is_not_outpaced(
    channels, per_channel_rps, busy_share, cycle_s, input_rps, lags, outpaced
):
    # A stream keeping up at 37 rec/s holds a batch or two in flight; a period that delivered a
    # little less than it took in looks like a backlog that did not shrink. Its one channel was
    # busy 18 % of 4.2-s cycles (~170 rec/s of busy time, ~90 sustained at the bench's 15-s bound).
    options = OPTIONS.model_copy(update={"overload": OPTIONS.overload.model_copy(update={"max_latency_s": 15.0})})
    windows, _ = run([make_snapshot(t, [2.0] * 4, [10.0] * 4, input_rate_rps=40.0, lag=150.0) for t in range(4)])
    for t, lag in zip((4, 9), lags, strict=True):  # the settling period (masked), then the first judged one
        snapshot = make_snapshot(
            t,
            [5.0] * channels,
            [per_channel_rps] * channels,
            input_rate_rps=input_rps,
            lag=lag,
            layout_epoch=1,
            busy_share=None if busy_share is None else [busy_share] * channels,
            batch_cycle_s=cycle_s,
        )
        windows, ev = evaluate(windows, snapshot, options)
    assert not ev.settling and ev.after_rescale and ev.outpaced == outpaced


def the_first_batch_after_a_rescale_to(channels, per_channel_rps, busy_share, input_rps, lag, *, rescaled=True):
    """One channel keeping up at 40 rec/s with ~1,000 records waiting, then (if `rescaled`) a rescale
    to `channels` whose first batch ends in the period; the evaluation of that period."""
    windows, _ = run([make_snapshot(t, [2.0], [40.0], input_rate_rps=40.0, lag=1_000.0) for t in range(4)])
    first = make_snapshot(
        9,
        [10.0] * channels,
        [per_channel_rps] * channels,
        input_rate_rps=input_rps,
        lag=lag,
        layout_epoch=1 if rescaled else 0,
        busy_share=[busy_share] * channels,
    )
    return evaluate(windows, first, OPTIONS)[1]


@pytest.mark.parametrize(
    ("channels", "per_channel_rps", "busy_share", "input_rps", "lag", "outrun"),
    [
        (2, 171.0, 0.70, 558.0, 6_911.0, True),  # eSault's 2 channels after 1 -> 2: 244 rec/s busy, 488 < 558
        (2, 171.0, 0.70, 460.0, 6_911.0, False),  # an input the busy channels could carry
        (2, 171.0, 0.70, 558.0, 900.0, False),  # the lag shrank over the period: catching up
        (6, 70.0, 0.29, 805.0, 8_600.0, False),  # a fresh 6 channels with a slow, cold first batch
    ],
    ids=["outrun", "within-ceiling", "lag-shrank", "cold-but-large-enough"],
)
def test_a_rescaled_layouts_first_batch_is_outrun_when_the_input_exceeds_its_busy_time_ceiling(
    channels, per_channel_rps, busy_share, input_rps, lag, outrun
):
    # The settling period's delivered rate says little (a cold first batch: the fresh 6 channels
    # delivered 70 rec/s each of the 134 the input needs), its busy-time rate bounds what any later
    # batch can do.
    ev = the_first_batch_after_a_rescale_to(channels, per_channel_rps, busy_share, input_rps, lag)
    assert ev.settling and ev.after_rescale and not ev.outpaced
    assert ev.outrun == outrun
    assert ev.total_throughput_rps == pytest.approx(channels * per_channel_rps)
    assert ev.backlog_records == (lag if outrun else max(0.0, lag - ev.in_flight_records))


def test_a_first_layouts_cold_start_is_never_outrun():
    ev = the_first_batch_after_a_rescale_to(1, 50.0, 0.2, 558.0, 6_911.0, rescaled=False)
    assert not ev.after_rescale and not ev.outrun


@pytest.mark.parametrize(
    ("input_rps", "lag", "outrun"),
    [(533.0, 3_000.0, True), (460.0, 3_000.0, False), (533.0, 500.0, False)],
    ids=["outrun", "within-ceiling", "lag-shrank"],
)
def test_a_period_awaiting_a_committed_layout_is_no_evidence_and_asks_if_that_layout_is_outrun(input_rps, lag, outrun):
    # eSault on a slow machine: 1 -> 2 committed at ~26 s, the first 2-channel batch still running
    # when the input stepped to 533 rec/s. The one channel's last batch: 180 rec/s, busy 73 % of it.
    windows, _ = run([make_snapshot(t, [2.0], [40.0], input_rate_rps=40.0, lag=1_000.0) for t in range(4)])
    seen = windows.periods_seen
    awaiting = replace(
        make_snapshot(4, [9.0], [180.0], input_rate_rps=input_rps, lag=lag, busy_share=[0.73]),
        awaited=CommittedLayout(epoch=1, channels=2),
    )
    windows, ev = evaluate(windows, awaiting, OPTIONS)
    assert ev.settling and not ev.ready_up and windows.periods_seen == seen  # judged: nothing
    assert ev.awaited == CommittedLayout(1, 2) and ev.deciding_layout == CommittedLayout(1, 2)
    assert ev.busy_ceiling_rps == pytest.approx(180.0 / 0.73)  # 247 a channel: 493 for two
    assert ev.outrun == outrun
    assert windows.last_lag_records == lag  # the next period starts from it


@pytest.mark.parametrize("awaiting", [True, False], ids=["awaiting", "settling"])
def test_whether_a_layout_is_outrun_is_asked_of_the_input_of_now(awaiting):
    # eSault on a slow machine: the tick came 2 s after the input stepped from 267 to 533 rec/s; the
    # period's rate averaged the step away (300), the last seconds' did not.
    windows, _ = run([make_snapshot(t, [2.0], [40.0], input_rate_rps=40.0, lag=1_000.0) for t in range(4)])
    if awaiting:
        period = replace(
            make_snapshot(4, [9.0], [180.0], input_rate_rps=300.0, lag=3_000.0, busy_share=[0.73]),
            awaited=CommittedLayout(epoch=1, channels=2),
        )
    else:
        period = make_snapshot(
            9, [10.0] * 2, [171.0] * 2, input_rate_rps=300.0, lag=3_000.0, layout_epoch=1, busy_share=[0.70] * 2
        )
    assert not evaluate(windows, period, OPTIONS)[1].outrun
    ev = evaluate(windows, replace(period, recent_input_rate_rps=533.0), OPTIONS)[1]
    assert ev.outrun and ev.input_rate_rps == 533.0  # and sized for it
    calm = evaluate(windows, replace(period, input_rate_rps=533.0, recent_input_rate_rps=300.0), OPTIONS)[1]
    assert not calm.outrun  # the input fell back within the ceiling: not outrun now


def test_every_evaluation_carries_the_input_of_now_for_an_outgrown_layout_to_be_sized_by():
    windows, _ = run([make_snapshot(t, [2.0], [40.0], input_rate_rps=40.0, lag=1_000.0) for t in range(4)])
    period = make_snapshot(4, [9.0], [180.0], input_rate_rps=423.0, lag=3_000.0, busy_share=[0.43])
    assert evaluate(windows, period, OPTIONS)[1].current_input_rate_rps == 423.0  # not read: the period's
    ev = evaluate(windows, replace(period, recent_input_rate_rps=672.0), OPTIONS)[1]
    assert not ev.outrun and ev.input_rate_rps == 423.0 and ev.current_input_rate_rps == 672.0


def test_a_stage_idle_longer_than_max_pause_is_judged_not_masked():
    options = OPTIONS.model_copy(update={"settling": OPTIONS.settling.model_copy(update={"max_pause_s": 3.0})})
    _, evs = after_a_rescale(pause_periods=8, then=0, options=options)
    # t=4..6 are within 3 s of the old layout's last period (t=3); from t=7 the stall is evidence.
    assert [ev.settling for ev in evs] == [True] * 3 + [False] * 5
    assert evs[-1].ready_up and evs[-1].congested


def cold_start(periods: int, processed_from: int, input_rps: float = 294.0) -> list[MetricsSnapshot]:
    """One channel's first layout: nothing processed before `processed_from`, 300 rec/s after."""
    return [
        make_snapshot(
            t,
            [2.0 + 2 * t],
            [0.0 if t < processed_from else 300.0],
            input_rate_rps=input_rps,
            lag=1500.0 * (t + 1) if input_rps else 0.0,
        )
        for t in range(periods)
    ]


def test_the_first_layouts_cold_start_is_masked_until_a_period_processes_something():
    # A loaded host's first batch with data outlasted three periods (0 processed, the lag growing):
    # judged, that read as a congested stage; it is the cold start, like a rescale's pause.
    need = max(OPTIONS.overload.reaction_time, OPTIONS.congestion.window)  # periods before ready_up
    windows, evs = run_each(cold_start(3 + need + 1, processed_from=3))
    assert [ev.settling for ev in evs] == [True] * 3 + [False] * (need + 1)
    assert [ev.ready_up for ev in evs] == [False] * (3 + need - 1) + [True] * 2
    assert not any(ev.after_rescale for ev in evs)
    assert windows.periods_seen == need + 1 and windows.throughput[-(need + 1) :].min() == 300.0
    assert SignalWindows.from_dict(windows.to_dict(), OPTIONS).started_at_s == 0.0


def test_a_first_layout_that_processes_nothing_beyond_max_pause_is_judged():
    # One channel overloaded before its first loaded batch finished: after max_pause_s (3 s here)
    # the stall is evidence, and the stage is congested.
    options = OPTIONS.model_copy(update={"settling": OPTIONS.settling.model_copy(update={"max_pause_s": 3.0})})
    _, evs = run_each(cold_start(8, processed_from=99), options)
    ev = evs[-1]
    assert not ev.settling and ev.ready_up and ev.congested and not ev.after_rescale


def test_a_first_layout_with_nothing_to_do_is_judged_not_masked():
    # No input and no lag: an idle stage, not a cold one (it may be scaled in).
    _, evs = run_each(cold_start(4, processed_from=99, input_rps=0.0))
    assert not any(ev.settling for ev in evs) and evs[-1].ready_up


def test_a_period_is_saturated_only_with_a_backlog_throughout_that_does_not_shrink():
    one_period = 1.0  # the default
    assert saturated_period(4000.0, 9000.0, throughput_rps=400.0, period_s=10.0, min_backlog_periods=one_period)
    # The input rises faster than the batches follow: the lag grows, but it never held a
    # period's work, so the throughput may be bounded by the input, not by the channels.
    assert not saturated_period(100.0, 3000.0, throughput_rps=400.0, period_s=10.0, min_backlog_periods=one_period)
    assert saturated_period(500.0, 3000.0, throughput_rps=400.0, period_s=10.0, min_backlog_periods=0.1)
    # A backlog that drains, or nothing processed, says nothing about capacity.
    assert not saturated_period(9000.0, 5000.0, throughput_rps=400.0, period_s=10.0, min_backlog_periods=0.1)
    assert not saturated_period(9000.0, 9000.0, throughput_rps=0.0, period_s=10.0, min_backlog_periods=0.1)
    # In the windows (one period by default): a lag that grows but stays under the 400 records
    # a period does is no backlog; once it holds more, the period is saturated.
    rising = [make_snapshot(t, [0.1, 0.1], [200.0, 200.0], input_rate_rps=600.0, lag=100.0 * t) for t in range(4)]
    _, ev = run(rising)
    assert ev.congested and not ev.saturated
    backlog = [
        make_snapshot(4 + t, [2.0, 2.0], [200.0, 200.0], input_rate_rps=600.0, lag=800.0 + 200 * t) for t in range(2)
    ]
    _, ev = run(rising + backlog)
    assert ev.saturated


def test_the_busy_time_rate_is_records_per_busy_second_once_the_channels_are_busy_enough():
    assert busy_time_rate(np.array([100.0, 60.0]), np.array([0.5, 0.3]), 0.3) == 200.0
    assert busy_time_rate(np.array([100.0, 60.0]), np.array([0.5, 0.3]), 0.5) is None  # a mean busy share of 0.4
    assert busy_time_rate(np.array([100.0]), None, 0.5) is None  # not measured
    assert busy_time_rate(np.array([100.0]), np.array([0.9]), None) is None  # off
    # Through the windows, with the option on: the latest period's rate.
    options = OPTIONS.model_copy(
        update={"controller": OPTIONS.controller.model_copy(update={"busy_rate_min_share": 0.5})}
    )
    windows, ev = None, None
    for t, busy in enumerate(([0.2, 0.2], [0.6, 0.8])):
        snapshot = make_snapshot(t, [2.0, 2.0], [70.0, 70.0], input_rate_rps=200.0, lag=50.0, busy_share=busy)
        windows, ev = evaluate(windows, snapshot, options)
    assert ev is not None and ev.busy_rate_rps == 100.0  # 140 rec/s over 1.4 busy channel-seconds a second


def test_a_busy_time_rate_is_net_of_each_micro_batchs_overhead_at_the_cycle_the_bound_allows():
    # The eSault bench's 1-channel stage: busy 40 % of a 4.6-s cycle, 248 rec/s by busy time, a 15-s
    # bound: 2.76 s of every cycle are spent outside the channel, of the 7.5 s a cycle may take.
    share = batch_overhead_share(4.6, np.array([0.4]), 15.0)
    assert share == pytest.approx(2.76 / 7.5)
    assert sustainable_rate(248.0, share) == pytest.approx(248.0 * (1 - 2.76 / 7.5))
    # The busiest channel's work is the batch's critical path; the others' idle time is not overhead.
    assert batch_overhead_share(2.0, np.array([0.2, 0.9, 0.5]), 10.0) == pytest.approx(0.2 / 5.0)
    assert batch_overhead_share(None, np.array([0.4]), 15.0) is None  # no cycle measured
    assert batch_overhead_share(4.6, None, 15.0) is None  # no busy share measured
    assert sustainable_rate(248.0, None) == 248.0  # no overhead measured: as it is
    assert sustainable_rate(248.0, batch_overhead_share(12.0, np.array([0.3]), 15.0)) is None  # 8.4 s: none meets 15 s
    # Through the windows: the rate as read, and the period's overhead beside it (the controller
    # nets the one by the least of the others, `controller.least_batch_overhead`).
    options = OPTIONS.model_copy(
        update={"controller": OPTIONS.controller.model_copy(update={"busy_rate_min_share": 0.5})}
    )
    read = []
    for cycle in (None, 0.5):
        snapshot = make_snapshot(
            0.0, [2.0, 2.0], [70.0, 70.0], input_rate_rps=200.0, lag=50.0, busy_share=[0.6, 0.8], batch_cycle_s=cycle
        )
        _, ev = evaluate(None, snapshot, options)
        read.append((ev.busy_rate_rps, ev.batch_overhead_share))
    bound = OPTIONS.overload.max_latency_s
    assert read == [(100.0, None), (100.0, pytest.approx(0.5 * 0.2 / (bound / 2)))]


def test_a_lag_held_by_idle_channels_is_no_backlog():
    # A micro-batch stream keeping up at 40 records/s holds ~150 records of lag (a batch cycle),
    # several short periods of its work; its channel idles between batches.
    assert saturated_period(150.0, 155.0, throughput_rps=40.0, period_s=2.5, min_backlog_periods=1.0)
    assert not saturated_period(
        150.0, 155.0, throughput_rps=40.0, period_s=2.5, min_backlog_periods=1.0, busy_share=0.2, min_busy_share=0.7
    )
    assert saturated_period(
        4000.0, 6000.0, throughput_rps=400.0, period_s=2.5, min_backlog_periods=1.0, busy_share=0.9, min_busy_share=0.7
    )
    # Through the windows: the same flat lag, channels busy a fifth of each period, then full.
    idle = [
        make_snapshot(t, [2.0, 2.0], [20.0, 20.0], input_rate_rps=40.0, lag=150.0, busy_share=[0.2, 0.2])
        for t in range(4)
    ]
    _, ev = run(idle)
    assert not ev.saturated
    busy = [
        make_snapshot(4 + t, [2.0, 2.0], [20.0, 20.0], input_rate_rps=40.0, lag=150.0, busy_share=[0.9, 0.8])
        for t in range(2)
    ]
    _, ev = run(idle + busy)
    assert ev.saturated


def test_scale_in_sizes_for_the_highest_input_of_the_configured_recent_periods():
    falling = [
        make_snapshot(t, [0.5, 0.5], [200.0, 200.0], input_rate_rps=rate) for t, rate in enumerate([800, 500, 250])
    ]
    _, ev = run(falling)
    assert ev.recent_max_input_rate_rps == 800.0  # the whole window (warmup_periods) by default
    options = OPTIONS.model_copy(
        update={"controller": OPTIONS.controller.model_copy(update={"scale_in_input_periods": 2})}
    )
    windows = None
    for snapshot in falling:
        windows, ev = evaluate(windows, snapshot, options)
    assert ev.recent_max_input_rate_rps == 500.0
