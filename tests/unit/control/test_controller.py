"""Controller rules P1-P6, split, merge, cooldown and bounds on scripted evaluations."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticity.control.controller import (
    ControllerState,
    LevelRecord,
    PendingRescale,
    ReadyTick,
    ScalingController,
    SteadyInput,
    scale_out_capacity,
)
from elasticity.control.levels import Levels, level_sequence
from elasticity.control.options import ControllerOptions
from elasticity.control.signals import CommittedLayout
from tests.fakes.control import make_evaluation

OPTIONS = ControllerOptions(min_channels=1, max_channels=64, cooldown_s=5.0)
LEVELS = Levels.between(1, 64)  # 1 2 3 4 6 8 12 16 24 32 48 64


def controller(**overrides) -> ScalingController:
    return ScalingController(OPTIONS.model_copy(update=overrides))


def lvl(channels: int) -> int:
    return LEVELS.level_of(channels)


def state_with(history: dict[int, tuple[float, bool]] | None = None, **fields) -> ControllerState:
    records = {
        lvl(ch): LevelRecord(throughput_rps=t, congested=c, time_s=0.0) for ch, (t, c) in (history or {}).items()
    }
    return ControllerState(history=records, **fields)


# ------------------------------------------------------------------ P6 levels
def test_levels_grow_super_linearly_and_include_the_bounds():
    assert level_sequence(1, 64) == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    assert level_sequence(3, 1000)[:3] == (3, 4, 6) and level_sequence(3, 1000)[-2:] == (768, 1000)
    assert LEVELS.level_of(9) == LEVELS.level_of(8)  # a split count belongs to the level below
    assert LEVELS.channels_at(LEVELS.level_covering(13.5)) == 16


# ------------------------------------------------------------------ P1 / P6
def test_p1_congested_without_history_scales_out_at_least_one_level():
    _, decision = controller().decide(state_with(), make_evaluation(8, congested=True, overloaded=range(8)), 100.0)
    assert decision.action == "scale_out" and decision.rule.startswith("P1")
    assert decision.from_channels == 8 and decision.to_channels == 12


def test_p6_jumps_to_the_level_the_measured_capacity_needs():
    # 8 saturated channels do 8000 rec/s (1000 each); 30000 rec/s arrive: 30000/(1000*0.7) = 42.9,
    # plus the 60000 records of lag drained in 20 s at 1000 each = 3 -> 45.9 -> level 48.
    ev = make_evaluation(
        8, congested=True, overloaded=range(8), throughput_rps=8000.0, input_rate_rps=30000.0, saturated=True
    )
    state, decision = controller().decide(state_with(), ev, 100.0)
    assert decision.action == "scale_out" and decision.rule == "P1+P6" and decision.to_channels == 48
    assert state.channel_capacity_rps == 1000.0 and state.capacity_samples_rps == [1000.0]


def test_p1_holds_when_history_shows_the_higher_level_did_not_raise_throughput():
    history = {12: (8200.0, True)}  # 12 channels gave no more than 8 do now
    ev = make_evaluation(8, congested=True, overloaded=range(8), throughput_rps=8000.0)
    _, decision = controller().decide(state_with(history), ev, 100.0)
    assert decision.action == "none" and decision.rule == "P1"
    assert "no gain" in decision.reason


def test_p5_remote_congestion_scales_back_down():
    # At 12 channels congested with no more throughput than 8 congested channels had: remote.
    history = {8: (8000.0, True)}
    last = ReadyTick(level=lvl(12), channels=12, throughput_rps=8100.0, congested=True, time_s=99.0)
    ev = make_evaluation(12, congested=True, overloaded=range(12), throughput_rps=8100.0)
    _, decision = controller().decide(state_with(history, last=last), ev, 100.0)
    assert decision.action == "scale_in" and decision.rule == "P5" and decision.to_channels == 8


def test_no_p5_when_scaling_up_did_raise_throughput():
    history = {8: (8000.0, True)}
    ev = make_evaluation(12, congested=True, overloaded=range(12), throughput_rps=12000.0)
    _, decision = controller().decide(state_with(history), ev, 100.0)
    assert decision.action == "scale_out"


# ------------------------------------------------------------------ P2
def test_p2_scales_in_to_the_lowest_level_the_capacity_allows():
    # capacity 1000/channel, 5000 rec/s at 70% -> 7.14 channels -> level 8.
    ev = make_evaluation(32, throughput_rps=5000.0)
    _, decision = controller().decide(state_with(channel_capacity_rps=1000.0), ev, 100.0)
    assert decision.action == "scale_in" and decision.rule == "P2" and decision.to_channels == 8


def test_p2_stops_above_a_level_that_history_shows_congested():
    ev = make_evaluation(32, throughput_rps=5000.0)
    state = state_with({12: (5000.0, True)}, channel_capacity_rps=1000.0)
    _, decision = controller().decide(state, ev, 100.0)
    assert decision.action == "scale_in" and decision.to_channels == 16


def test_a_throughput_above_the_capacity_estimate_raises_it_so_p2_can_scale_in_later():
    # Congestion measured 200 rec/s per channel mid-batch; 8 channels then did 32000 rec/s.
    busy = make_evaluation(8, throughput_rps=32000.0)
    state, decision = controller().decide(state_with(channel_capacity_rps=200.0), busy, 100.0)
    assert state.channel_capacity_rps == 4000.0 and decision.action == "none"
    # In the valley, 1500 rec/s fit one channel of 4000 at 70 %; with 200 they would need 8+.
    quiet = make_evaluation(8, throughput_rps=1500.0)
    _, decision = controller().decide(state.model_copy(update={"last": None}), quiet, 200.0)
    assert decision.action == "scale_in" and decision.to_channels == 1
    # Never congested, no estimate: the throughput alone does not make one (P2 probes instead).
    state, _ = controller().decide(state_with(), busy, 100.0)
    assert state.channel_capacity_rps is None


def test_p2_holds_when_the_lower_level_would_run_too_hot():
    ev = make_evaluation(8, throughput_rps=5000.0)  # 6 channels would run at 83%
    _, decision = controller().decide(state_with(channel_capacity_rps=1000.0), ev, 100.0)
    assert decision.action == "none" and decision.rule == "P2"


def test_p2_names_the_backlog_when_draining_it_is_what_keeps_the_channels():
    # 6 x 1000 rec/s carry 2,900 rec/s at 50 % (5,800), but not the 20,000-record lag drained in
    # 20 s on top (1,000 more): the hold must say so, not "6 channels would run at 48 % (> 50 %)".
    ev = make_evaluation(8, throughput_rps=2900.0, lag_records=20000.0)
    _, decision = controller(scale_in_utilization=0.5).decide(state_with(channel_capacity_rps=1000.0), ev, 100.0)
    assert decision.action == "none" and decision.rule == "P2"
    assert "draining the lag of 20,000 records in 20 s 1,000 more" in decision.reason, decision.reason


@pytest.mark.parametrize(("batch_cycle_s", "to_channels"), [(None, None), (1.1, 4)])
def test_p2_does_not_count_the_records_a_keeping_up_micro_batch_has_in_flight(batch_cycle_s, to_channels):
    # The eSault trace at 600 rec/s on the real stack: 6 channels of 199 rec/s keep up (in = out),
    # and the lag against the last committed batch is ~2 cycles of input (the batch running and
    # what arrives meanwhile). Counted as a backlog, its drain (1,262 / 20 s = 63 rec/s) lifts
    # 4 channels' need above the 797 rec/s they carry, and P2 held 6 through the peak.
    ev = make_evaluation(6, throughput_rps=604.0, lag_records=1262.0, batch_cycle_s=batch_cycle_s)
    state = state_with(channel_capacity_rps=199.27)
    _, decision = controller(max_channels=8, scale_in_utilization=0.8).decide(state, ev, 100.0)
    if to_channels is None:
        assert decision.action == "none" and "draining the lag of 1,262 records" in decision.reason, decision.reason
    else:
        assert decision.action == "scale_in" and decision.to_channels == to_channels, decision.reason


def test_p2_still_drains_a_real_backlog_beyond_the_records_in_flight():
    # 20,000 records behind with 1 s cycles at 2,900 rec/s: 5,800 in flight, 14,200 to drain.
    ev = make_evaluation(8, throughput_rps=2900.0, lag_records=20000.0, batch_cycle_s=1.0)
    _, decision = controller(scale_in_utilization=0.5).decide(state_with(channel_capacity_rps=1000.0), ev, 100.0)
    assert decision.action == "none" and decision.rule == "P2"
    assert "draining the lag of 14,200 records (beyond the 5,800 in flight)" in decision.reason, decision.reason


def test_p2_without_capacity_probes_one_level_only_when_most_channels_are_underloaded():
    light = make_evaluation(8, underloaded=range(8))
    _, decision = controller().decide(state_with(), light, 100.0)
    assert decision.action == "scale_in" and decision.to_channels == 6
    busy = make_evaluation(8)
    _, decision = controller().decide(state_with(), busy, 100.0)
    assert decision.action == "none"


def test_p2_without_a_saturated_period_scales_in_to_what_the_lower_bound_carries():
    # A scale-out that lands before any saturated period leaves no capacity estimate; once the
    # input falls, the channels are not light against their own (low) peaks either. One channel
    # demonstrably did 296 rec/s: 20 rec/s fit it, so P2 goes back to 1 channel.
    rising = make_evaluation(1, congested=True, overloaded=[0], throughput_rps=296.0, input_rate_rps=300.0)
    state, decision = controller().decide(state_with(), rising, 100.0)
    assert decision.action == "scale_out" and state.channel_capacity_rps is None
    quiet = make_evaluation(2, throughput_rps=20.0, time_s=400.0)
    state = state.model_copy(update={"pending": None, "cooldown_until_s": None, "last": None})
    _, decision = controller().decide(state, quiet, 400.0)
    assert decision.action == "scale_in" and decision.to_channels == 1 and decision.rule == "P2"
    assert "lower bound of 296 rec/s" in decision.reason
    # A lower bound that does not carry the input keeps the stage where it is.
    busy = make_evaluation(2, throughput_rps=500.0, time_s=400.0)
    _, decision = controller().decide(state, busy, 400.0)
    assert decision.action == "none"


def test_p2_holds_when_history_shows_the_lower_level_congested_even_without_capacity():
    _, decision = controller().decide(state_with({6: (4000.0, True)}), make_evaluation(8, underloaded=range(8)), 100.0)
    assert decision.action == "none" and "history" in decision.reason


# ------------------------------------------------------------------ P3 / P4
def test_p3_congestion_appearing_at_the_same_level_forgets_history_above():
    history = {4: (4000.0, True), 12: (8000.0, True), 16: (8000.0, True)}
    last = ReadyTick(level=lvl(8), channels=8, throughput_rps=7000.0, congested=False, time_s=99.0)
    ev = make_evaluation(8, congested=True, overloaded=range(8), throughput_rps=8000.0)
    state, decision = controller().decide(state_with(history, last=last), ev, 100.0)
    assert set(state.history) == {lvl(4), lvl(8)}
    # With the stale no-gain records above forgotten, P1 scales out instead of holding.
    assert decision.action == "scale_out" and "P3" in decision.reason


def test_p4_throughput_fall_at_the_same_level_forgets_history_below():
    history = {4: (4000.0, True), 6: (6000.0, True), 12: (9000.0, False)}
    last = ReadyTick(level=lvl(8), channels=8, throughput_rps=8000.0, congested=False, time_s=99.0)
    state = state_with(history, last=last, reference_throughput_rps=8000.0, channel_capacity_rps=1000.0)
    ev = make_evaluation(8, throughput_rps=3000.0)
    new_state, decision = controller().decide(state, ev, 100.0)
    assert set(new_state.history) == {lvl(8), lvl(12)}
    # The congested records of 4 and 6 channels are gone, so P2 may go down to 6 (3000/0.7/1000 = 4.3 -> 6).
    assert decision.action == "scale_in" and decision.to_channels == 6 and "P4" in decision.reason


@pytest.mark.parametrize(("input_rps", "forgotten"), [(20.0, True), (280.0, False)])
def test_p4_an_input_fall_during_a_rescale_forgets_the_congested_level_below(input_rps, forgotten):
    # 1 channel was congested under 294 rec/s before its first loaded batch had finished (0
    # rec/s processed), and the stage went to 2. If the input fell to 20 rec/s while the
    # rescale settled, no observation saw the fall; at 280 rec/s the record must stay.
    congested_at_one = LevelRecord(throughput_rps=0.0, congested=True, time_s=0.0, input_rps=294.0)
    last = ReadyTick(level=lvl(2), channels=2, throughput_rps=input_rps, congested=False, time_s=99.0)
    state = ControllerState(history={lvl(1): congested_at_one}, last=last, reference_throughput_rps=input_rps)
    ev = make_evaluation(2, throughput_rps=input_rps, underloaded=range(2))
    new_state, decision = controller().decide(state, ev, 100.0)
    assert (lvl(1) not in new_state.history) == forgotten
    if forgotten:
        assert decision.action == "scale_in" and decision.to_channels == 1 and "P4" in decision.reason
    else:
        assert decision.action == "none" and "history" in decision.reason


def test_a_congested_window_that_processed_nothing_keeps_the_capacity_estimate():
    ev = make_evaluation(1, congested=True, overloaded=[0], throughput_rps=0.0, input_rate_rps=294.0)
    for known in (None, 230.0):
        new_state, decision = controller().decide(state_with(channel_capacity_rps=known), ev, 100.0)
        assert new_state.channel_capacity_rps == known
        assert decision.action == "scale_out"


# ------------------------------------------------------------------ split / merge
def test_split_the_one_overloaded_channel_when_the_others_are_fine():
    ev = make_evaluation(8, congested=True, overloaded=[5])
    _, decision = controller().decide(state_with(), ev, 100.0)
    assert decision.action == "split" and decision.channel == 5 and decision.to_channels == 9
    assert "channel 5" in decision.reason and "skew" in decision.reason


def test_no_split_when_split_merge_is_disabled_or_overload_is_widespread():
    ev = make_evaluation(8, congested=True, overloaded=[5])
    _, decision = controller(enable_split_merge=False).decide(state_with(), ev, 100.0)
    assert decision.action == "scale_out"
    ev = make_evaluation(8, congested=True, overloaded=range(5))
    _, decision = controller().decide(state_with(), ev, 100.0)
    assert decision.action == "scale_out"


def test_split_the_channel_doing_most_of_the_work_when_every_channel_is_late():
    # Micro-batches: every channel's probes wait for the slowest task, so all four are late;
    # channel 2 was busy throughout, the others a third of the time.
    ev = make_evaluation(4, congested=True, overloaded=range(4), busy_share=[0.3, 0.35, 0.98, 0.3])
    _, decision = controller().decide(state_with(), ev, 100.0)
    assert decision.action == "split" and decision.channel == 2 and decision.to_channels == 5
    assert "busy 98% of the time" in decision.reason and "skew" in decision.reason


def test_split_the_channel_given_most_records_when_its_busy_share_is_capped():
    # A loaded host: the hot channel is busy throughout (a share cannot pass 1) and every batch's
    # fixed work keeps the other busy 70% of the time, a busy-time ratio of 1.4; the records each
    # processed keep the key skew's ratio (70% of them against 30%).
    ev = make_evaluation(
        2, congested=True, overloaded=range(2), busy_share=[1.0, 0.7], channel_throughput_rps=[280.0, 120.0]
    )
    _, decision = controller().decide(state_with(), ev, 100.0)
    assert decision.action == "split" and decision.channel == 0 and decision.to_channels == 3
    assert "processed 2.3x its records" in decision.reason


def test_no_split_when_neither_busy_time_nor_records_single_out_a_channel():
    ev = make_evaluation(
        2, congested=True, overloaded=range(2), busy_share=[1.0, 0.7], channel_throughput_rps=[210.0, 190.0]
    )
    _, decision = controller().decide(state_with(), ev, 100.0)
    assert decision.action == "scale_out"


@pytest.mark.parametrize(
    ("busy_share", "top_key_share"),
    [
        ([0.9, 0.85, 0.97, 0.8], None),  # every channel busy: the load, not a channel
        ([0.3, 0.35, 0.98, 0.3], [0.1, 0.1, 0.8, 0.1]),  # one key is most of the hot channel's work
        (None, None),  # no busy times measured: lateness alone says load
    ],
)
def test_no_split_by_work_when_the_work_is_even_or_one_key(busy_share, top_key_share):
    ev = make_evaluation(4, congested=True, overloaded=range(4), busy_share=busy_share, top_key_share=top_key_share)
    _, decision = controller().decide(state_with(), ev, 100.0)
    assert decision.action == "scale_out"


def test_merge_a_lone_underloaded_channel_into_its_neighbours():
    # 6 channels would run at 93%: no P2; channel 2 alone is light -> merge it.
    ev = make_evaluation(8, underloaded=[2], throughput_rps=5600.0)
    _, decision = controller().decide(state_with(channel_capacity_rps=1000.0), ev, 100.0)
    assert decision.action == "merge" and decision.channel == 2 and decision.to_channels == 7


# ------------------------------------------------------------------ cooldown, warm-up, bounds
def test_no_decision_while_cooling_down_after_a_rescale():
    ctl = controller()
    congested = make_evaluation(8, congested=True, overloaded=range(8))
    state, first = ctl.decide(state_with(), congested, 100.0)
    assert first.is_rescale and state.cooldown_until_s == 105.0
    state, second = ctl.decide(state, make_evaluation(12, congested=True, overloaded=range(12)), 104.0)
    assert second.action == "none" and second.rule == "cooldown"
    _, third = ctl.decide(
        state, make_evaluation(12, congested=True, overloaded=range(12), throughput_rps=12000.0), 105.0
    )
    assert third.is_rescale


def test_no_decision_before_the_windows_are_full():
    _, decision = controller().decide(state_with(), make_evaluation(8, congested=True, ready_up=False), 100.0)
    assert decision.action == "none" and decision.rule == "warmup"


def test_bounds_hold_at_the_maximum_and_the_minimum():
    _, decision = controller().decide(state_with(), make_evaluation(64, congested=True, overloaded=range(64)), 1.0)
    assert decision.action == "none" and decision.rule == "bounds"
    _, decision = controller().decide(state_with(), make_evaluation(1, underloaded=[0]), 1.0)
    assert decision.action == "none" and decision.rule == "bounds"
    ev = make_evaluation(
        4, congested=True, overloaded=range(4), throughput_rps=4000.0, input_rate_rps=1e6, saturated=True
    )
    _, decision = controller(max_channels=40).decide(state_with(), ev, 1.0)
    assert decision.to_channels == 40


# ------------------------------------------------------------------ properties
evaluations = st.builds(
    lambda channels, congested, hot, light, throughput, rate, ready: make_evaluation(
        channels,
        congested=congested,
        overloaded=range(min(hot, channels)),
        underloaded=range(min(light, channels)),
        throughput_rps=throughput,
        input_rate_rps=rate,
        ready_down=ready,
    ),
    channels=st.integers(3, 40),
    congested=st.booleans(),
    hot=st.integers(0, 40),
    light=st.integers(0, 40),
    throughput=st.floats(1.0, 1e6),
    rate=st.floats(1.0, 1e7),
    ready=st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(evaluations, min_size=1, max_size=25))
def test_decisions_stay_within_bounds_and_state_round_trips_through_json(sequence):
    ctl = ScalingController(ControllerOptions(min_channels=3, max_channels=40, cooldown_s=0.0))
    state = ControllerState()
    for tick, ev in enumerate(sequence):
        state, decision = ctl.decide(state, ev, float(tick))
        assert 3 <= decision.to_channels <= 40 or decision.action == "none"
        assert decision.from_channels == ev.channels
        if decision.action in ("split", "merge"):
            assert decision.channel is not None and 0 <= decision.channel < ev.channels
        restored = ControllerState.from_json(state.to_json())
        assert restored == state
        json.loads(decision.model_dump_json())  # the decision record is JSON too


# ------------------------------------------------------------------ capacity from saturated periods only
def test_an_unsaturated_congestion_gives_a_lower_bound_only_and_p1_steps_one_level():
    # One channel does 377 rec/s while the input rises to 800: congested, but the throughput is
    # bounded by the input (no backlog of a period's work), so it is no capacity to size P6 by.
    rising = make_evaluation(1, congested=True, overloaded=[0], throughput_rps=377.0, input_rate_rps=800.0)
    state, decision = controller().decide(state_with(), rising, 100.0)
    assert decision.action == "scale_out" and decision.rule == "P1" and decision.to_channels == 2
    assert state.channel_capacity_rps is None and state.capacity_floor_rps == 377.0


def test_before_any_saturated_period_p6_sizes_a_scale_out_by_the_busy_time_rate():
    # Square's first high phase on the real stack: one channel, busy, 215 rec/s per busy second
    # while 700 rec/s arrive and the period is not yet saturated. Stepping to 2 channels cost a
    # batch of growing backlog; the busy-time rate says 700 / (215 x 0.7) = 4.7 (+ the lag's drain).
    rising = make_evaluation(
        1, congested=True, overloaded=[0], throughput_rps=200.0, input_rate_rps=700.0, busy_rate_rps=215.0
    )
    state, decision = controller(busy_rate_min_share=0.5).decide(state_with(), rising, 100.0)
    assert decision.action == "scale_out" and decision.rule == "P1+P6" and decision.to_channels == 6
    assert "by busy time, none saturated yet" in decision.reason
    assert state.busy_rate_samples_rps == [215.0] and state.channel_capacity_rps is None  # P2 does not take it
    # Without a busy-time rate (the option off, the simulator's default: the detectors read none)
    # Gedik's one-level probe stands in.
    _, decision = controller().decide(state_with(), dataclasses.replace(rising, busy_rate_rps=None), 100.0)
    assert decision.to_channels == 2


def test_a_busy_time_rate_net_of_the_batch_overhead_sizes_the_first_scale_out_for_what_channels_deliver():
    # The eSault bench's run 2 at 0f8ba15, 26.0 s: one channel behind at 369 rec/s, 248 rec/s by busy
    # time. Sized by it, 1 -> 2; the channels then delivered 197 rec/s each, the input reached 800 and
    # the stage was judged outgrown only 22 s later (SLO attainment 0.865). Net of the batch overhead
    # (2.76 s of the 7.5-s cycle its 15-s bound allows: 157 rec/s), 1 -> 3, as run 1 did from a
    # saturated 174 (0.995).
    ctl = controller(
        busy_rate_min_share=0.5, scale_out_utilization=0.9, scale_in_utilization=0.8, drain_within_band=True
    )
    targets = []
    for overhead in (None, 2.76 / 7.5):
        behind = make_evaluation(
            1,
            congested=True,
            throughput_rps=81.3,
            input_rate_rps=368.8,
            lag_records=2050.0,
            busy_rate_rps=248.0,
            batch_overhead_share=overhead,
        )
        targets.append(ctl.decide(state_with(), behind, 26.0)[1].to_channels)
    assert targets == [2, 3]


def test_a_busy_time_rate_is_netted_by_the_least_batch_overhead_the_recent_periods_showed():
    # Square's first high phase with one core busy at 16209c6 (run 1): the first layout's one channel
    # read 274 rec/s of busy time in a cold period that spent 3.8 s of its 8-s cycle outside the
    # channel; the 2 channels after it spent 2.0 s a cycle outside, too little busy to read a rate.
    # Netted by its own period, 274 -> 134 and 772 rec/s -> 8 channels; the 4 channels of the run's
    # static segment carried 800 rec/s at the SLO. By the least overhead seen, 274 -> 202: 6.
    ctl = controller(
        busy_rate_min_share=0.5, scale_out_utilization=0.7, scale_in_utilization=0.7, drain_within_band=True
    )
    state = state_with()
    cold = make_evaluation(
        1, throughput_rps=143.0, input_rate_rps=162.0, busy_rate_rps=274.0, batch_overhead_share=3.84 / 7.5
    )
    state, _ = ctl.decide(state, cold, 26.0)
    assert scale_out_capacity(state) == pytest.approx(274.0 * (1 - 3.84 / 7.5))
    behind = make_evaluation(
        2,
        congested=True,
        throughput_rps=173.0,
        input_rate_rps=772.0,
        lag_records=4500.0,
        batch_overhead_share=1.98 / 7.5,
    )
    state, decision = ctl.decide(state, behind, 53.5)
    assert state.batch_overhead_shares == [pytest.approx(3.84 / 7.5), pytest.approx(1.98 / 7.5)]
    assert scale_out_capacity(state) == pytest.approx(274.0 * (1 - 1.98 / 7.5))
    assert decision.rule == "P1+P6" and decision.to_channels == 6
    assert "net of a batch overhead of 26% of the cycle the SLO allows" in decision.reason


def test_a_saturated_estimate_replaces_the_busy_time_rate_for_p6():
    state = state_with(busy_rate_samples_rps=[400.0])  # read high: a batch's fixed costs are not busy time
    saturated = make_evaluation(
        2, congested=True, overloaded=[0, 1], throughput_rps=400.0, input_rate_rps=700.0, saturated=True
    )
    state, decision = controller(busy_rate_min_share=0.5).decide(state, saturated, 100.0)
    assert state.channel_capacity_rps == 200.0
    # 700 / (200 x 0.7) = 5 -> level 6; by the busy-time rate it would be 700 / (400 x 0.7) = 2.5 -> 3.
    assert "saturated period(s)" in decision.reason and decision.to_channels == 6


def test_the_capacity_estimate_is_the_saturated_samples_mean_less_their_spread():
    ctl = controller(cooldown_s=0.0)
    state = state_with()
    for t, per_channel in enumerate((900.0, 1100.0, 1000.0)):
        ev = make_evaluation(4, throughput_rps=4 * per_channel, saturated=True, congested=True, overloaded=range(4))
        state, _ = ctl.decide(state.model_copy(update={"pending": None}), ev, 100.0 + t)
    assert state.capacity_samples_rps == [900.0, 1100.0, 1000.0]
    spread = float(np.std([900.0, 1100.0, 1000.0]))
    assert state.channel_capacity_rps == pytest.approx(1000.0 - spread)
    # Only the last capacity_samples saturated periods count.
    state, _ = controller(capacity_samples=2).decide(
        state.model_copy(update={"pending": None}), make_evaluation(4, throughput_rps=4000.0, saturated=True), 110.0
    )
    assert state.capacity_samples_rps == [1000.0, 1000.0]


def test_p6_sizes_for_draining_the_lag_and_one_pause_of_input():
    state = state_with(channel_capacity_rps=1000.0)
    calm = make_evaluation(
        4, congested=True, overloaded=range(4), throughput_rps=4000.0, input_rate_rps=10_000.0, lag_records=0.0
    )
    _, decision = controller().decide(state, calm, 100.0)
    assert decision.to_channels == 16  # 10000 / 700 = 14.3
    behind = make_evaluation(
        4,
        congested=True,
        overloaded=range(4),
        throughput_rps=4000.0,
        input_rate_rps=10_000.0,
        lag_records=100_000.0,
        rescale_pause_s=5.0,
    )
    _, decision = controller().decide(state, behind, 100.0)
    assert decision.to_channels == 24  # 14.3 + (100000 + 5 x 10000) / (20 s x 1000) = 21.8
    # A congested stage's batches are long because it is behind: the records in flight count
    # (5 s cycles at 10,000 rec/s would put all 100,000 in flight, and 14.3 channels on 16).
    long_batches = dataclasses.replace(behind, batch_cycle_s=5.0, rescale_pause_s=0.0)
    _, decision = controller().decide(state, long_batches, 100.0)
    assert decision.to_channels == 24  # 14.3 + 100000 / (20 s x 1000) = 19.3
    _, decision = controller(drain_target_s=None).decide(state, behind, 100.0)
    assert decision.to_channels == 16


def twelve_channels_behind():
    """12 congested channels at 10,000 rec/s with 100,000 records behind and a 5 s pause measured."""
    return make_evaluation(
        12, congested=True, overloaded=range(12), throughput_rps=10_000.0, lag_records=100_000.0, rescale_pause_s=5.0
    )


@pytest.mark.parametrize(("within_band", "scale_out_to", "then"), [(False, 24, "scale_in"), (True, 16, "none")])
def test_p6_drains_within_the_band_p2_keeps_so_the_drain_is_not_reversed(within_band, scale_out_to, then):
    # 10000 rec/s at 90 % of 1000 each: 11.1 channels; the lag plus one pause of input drained in
    # 20 s: 7.5 more -> 18.6 -> 24. At 80 % (what P2 keeps) 10000 rec/s need 12.5 -> 16.
    band = controller(scale_out_utilization=0.9, scale_in_utilization=0.8, drain_within_band=within_band)
    state = state_with(channel_capacity_rps=1000.0)
    behind = twelve_channels_behind()
    _, decision = band.decide(state, behind, 100.0)
    assert decision.action == "scale_out" and decision.to_channels == scale_out_to
    # The backlog drained, the same input: P2 scales the drain's extra channels back in, unless
    # there were none beyond what it keeps.
    drained = make_evaluation(scale_out_to, throughput_rps=10_000.0, lag_records=0.0)
    _, decision = band.decide(state, drained, 200.0)
    assert decision.action == then, decision.reason


@pytest.mark.parametrize(
    ("input_rps", "at_s", "hold_s", "then"),
    [
        (10_000.0, 200.0, 300.0, "none"),  # the input that scaled out: a scale-in would reverse it
        (10_000.0, 400.0, 300.0, "scale_in"),  # held as long as scale_in_hold_s allows
        (10_000.0, 200.0, None, "scale_in"),  # no hold
        (8_000.0, 200.0, 300.0, "scale_in"),  # the input fell out of its band: no reversal
    ],
)
def test_no_scale_in_follows_a_scale_out_until_the_input_falls(input_rps, at_s, hold_s, then):
    # eSault's peak on the real stack: a drain beyond the band (24, not 16) and, once drained, P2
    # back to 16 at the same input, a reversal in one steady phase. The drain's channels stay.
    drain = controller(scale_out_utilization=0.9, scale_in_utilization=0.8, scale_in_hold_s=hold_s)
    state, decision = drain.decide(state_with(channel_capacity_rps=1000.0), twelve_channels_behind(), 100.0)
    assert decision.to_channels == 24 and state.scaled_out_at_s == 100.0
    drained = make_evaluation(24, time_s=at_s, throughput_rps=input_rps, lag_records=0.0, layout_epoch=1)
    state, decision = drain.decide(state, drained, at_s)
    assert decision.action == then, decision.reason
    assert decision.to_channels == (24 if then == "none" else 12 if input_rps < 10_000 else 16)


def input_held_since_90_s_at(
    rate_rps: float, rose: bool = False, scaled_out_at_s: float | None = None
) -> ControllerState:
    """A known capacity of 1000 rec/s per channel, the input steady at `rate_rps` since 90 s
    (a band the input rose into when `rose`; a scale-out decided at `scaled_out_at_s`)."""
    band = SteadyInput(since_s=90.0, low_rps=rate_rps, high_rps=rate_rps, rose=rose)
    return state_with(channel_capacity_rps=1000.0, steady_input=band, scaled_out_at_s=scaled_out_at_s)


def test_p6_drains_beyond_the_band_in_a_step_of_a_rise_in_steps():
    # eSault's rise on the real stack: with the drain held in the band, the first scale-out of a
    # rise in steps is too small for its next step. In the period the input steps up again, the
    # drain is sized in full (24, as without the band); once the input holds, in the band (16).
    band = controller(scale_out_utilization=0.9, scale_in_utilization=0.8, drain_within_band=True)
    behind = twelve_channels_behind()
    stepping = input_held_since_90_s_at(5e3, rose=True, scaled_out_at_s=90.0)
    state, decision = band.decide(stepping, behind, 100.0)
    assert state.steady_input.stepping_up_at(100.0) and decision.to_channels == 24
    held = input_held_since_90_s_at(1e4, rose=True)
    _, decision = band.decide(held, behind, 100.0)
    assert decision.to_channels == 16
    fell = input_held_since_90_s_at(2e4, rose=True)
    state, decision = band.decide(fell, behind, 100.0)
    assert not state.steady_input.stepping_up_at(100.0) and decision.to_channels == 16


@pytest.mark.parametrize(
    ("rise_since_s", "scaled_out_at_s", "to_channels"),
    [
        (None, 90.0, 24),  # the rise began with the band the input leaves, which needed a scale-out
        (None, None, 16),  # a step the stage absorbed
        (None, 85.0, 16),  # a scale-out before the rise began
        (80.0, 85.0, 24),  # in an earlier step of the same rise
    ],
)
def test_p6_drains_beyond_the_band_only_in_a_rise_that_already_outgrew_the_stage(
    rise_since_s, scaled_out_at_s, to_channels
):
    # The band the input leaves (since 90 s) began with a rise: a rise in steps by its rates. Only a
    # scale-out decided since the rise began makes its next step evidence of one the stage cannot
    # carry; steps absorbed without one are not.
    band = controller(scale_out_utilization=0.9, scale_in_utilization=0.8, drain_within_band=True)
    state = input_held_since_90_s_at(5e3, rose=True, scaled_out_at_s=scaled_out_at_s)
    rising = state.steady_input.model_copy(update={"rise_since_s": rise_since_s})
    state, decision = band.decide(state.model_copy(update={"steady_input": rising}), twelve_channels_behind(), 100.0)
    assert state.steady_input.stepping_up_at(100.0)
    assert state.steady_input.rise_since_s == (90.0 if rise_since_s is None else rise_since_s)
    assert decision.to_channels == to_channels, decision.reason


def test_a_band_remembers_when_its_rise_began():
    valley = SteadyInput(since_s=0.0, low_rps=40.0, high_rps=40.0)
    first = valley.after(255.0, 21.0, 0.15)
    second = first.after(531.0, 31.0, 0.15)
    assert (first.rise_since_s, second.rise_since_s) == (21.0, 21.0)
    assert second.after(540.0, 36.0, 0.15).rise_since_s == 21.0  # the same band
    fell = second.after(300.0, 41.0, 0.15)
    assert fell.rise_since_s is None and fell.after(800.0, 46.0, 0.15).rise_since_s == 46.0


def test_a_period_that_straddles_a_single_jump_is_not_a_step_of_a_rise():
    # Square run 2 at 143bc68 on the real stack: 2 channels (183 rec/s each) carried the low phase
    # (160 rec/s, a band the input fell into); the period that straddled the jump to 800 read 331,
    # which 2 channels absorbed, and the next one 787 with 5.7 s of input behind. 6 channels keep
    # the peak; draining beyond them bought 2 -> 8, held until the input fell (1.085 x the best
    # static's channel-seconds).
    ctl = controller(drain_within_band=True, **STREAM_POLICY_BAND)
    low = SteadyInput(since_s=110.0, low_rps=158.0, high_rps=166.0, rose=False, rose_before=True)
    state = state_with(channel_capacity_rps=183.0, steady_input=low)
    state, decision = ctl.decide(state, make_evaluation(2, time_s=145.0, throughput_rps=331.0), 145.0)
    assert decision.action == "none" and state.steady_input.rose
    jumped = make_evaluation(
        2,
        time_s=150.0,
        congested=True,
        throughput_rps=166.0,
        input_rate_rps=787.0,
        lag_records=5.7 * 787.0,
        batch_cycle_s=3.4,
    )
    state, decision = ctl.decide(state, jumped, 150.0)
    # By the rates alone a rise in steps (160 -> 331 -> 787), but nothing scaled out at 331.
    assert state.steady_input.rose and state.steady_input.rose_before
    # 787 / (183 x 0.8) = 5.4 -> 6, the count P2 keeps; the full drain: 4.8 + 1.2 -> 8.
    assert decision.action == "scale_out" and decision.to_channels == 6, decision.reason


def test_p6_drains_within_the_band_after_a_single_jump():
    # The square trace on the real stack: 160 -> 800 rec/s in one jump from a low phase the input
    # fell into (or the first band). The drain beyond the band (2 -> 8 where 6 keep the peak)
    # bought channels for a next step that never came, until the input fell.
    band = controller(scale_out_utilization=0.9, scale_in_utilization=0.8, drain_within_band=True)
    jumped = input_held_since_90_s_at(5e3, rose=False)
    state, decision = band.decide(jumped, twelve_channels_behind(), 100.0)
    assert state.steady_input.rose and not state.steady_input.stepping_up_at(100.0)
    assert decision.to_channels == 16, decision.reason


def test_p6_within_the_band_still_carries_the_input_at_the_scale_out_utilization():
    # No band (both targets 0.7): the drain gets no channel beyond the input's 14.3 -> 16.
    state = state_with(channel_capacity_rps=1000.0)
    behind = make_evaluation(
        4, congested=True, overloaded=range(4), throughput_rps=4000.0, input_rate_rps=10_000.0, lag_records=100_000.0
    )
    _, decision = controller(drain_within_band=True).decide(state, behind, 100.0)
    assert decision.to_channels == 16


def the_first_period_after_settling_at_2_channels(
    input_rps: float, *, outpaced: bool = True, after_rescale: bool = True, throughput_rps: float = 350.0
) -> object:
    """The slow machine's esault run at 39.6 s: 2 channels, the first period after the 1 -> 2
    rescale's settling, its windows not refilled; 350 rec/s processed with 7,506 records behind."""
    return make_evaluation(
        2,
        time_s=39.6,
        ready_up=False,
        ready_down=False,
        after_rescale=after_rescale,
        outpaced=outpaced,
        throughput_rps=throughput_rps,
        input_rate_rps=input_rps,
        lag_records=7_506.0,
        batch_cycle_s=8.6,
    )


STREAM_POLICY_BAND = {"max_channels": 8, "scale_out_utilization": 0.9, "scale_in_utilization": 0.8}
"""The Spark bench's bounds and targets (its policy: drain_within_band on)."""


def test_a_layout_the_input_outgrew_scales_out_before_its_windows_refill():
    # Waiting two more periods for the windows cost that run 4,200 records of backlog and its
    # peak phase the SLO: 6 channels at 50 s could not drain what had piled up.
    ctl = controller(drain_within_band=True, **STREAM_POLICY_BAND)
    before = state_with(
        steady_input=SteadyInput(since_s=21.0, low_rps=255.0, high_rps=255.0, rose=True), scaled_out_at_s=21.0
    )
    state, decision = ctl.decide(before, the_first_period_after_settling_at_2_channels(796.0), 39.6)
    # No capacity known: the period's 175 rec/s a channel. 796 / (175 x 0.9) = 5.1 channels plus
    # all 7,506 records behind (an outpaced stage has none in flight) drained in 20 s = 2.1 -> 8
    # (eSault's input rose from its valley to 255 and out of that in this period, a rise in steps:
    # the drain is sized in full).
    assert decision.action == "scale_out" and decision.to_channels == 8, decision.reason
    assert "outgrown" in decision.reason and decision.signals["outgrown"] == 1.0
    # One period of a fresh layout enters no level history, and the rescale is pending.
    assert state.history == {} and state.pending is not None and state.decisions == 1


@pytest.mark.parametrize(("delivered_rps", "to_channels"), [(345.0, 8), (600.0, 6)], ids=["below", "above"])
def test_an_outgrown_layout_without_a_saturated_estimate_is_sized_by_what_its_channels_delivered(
    delivered_rps, to_channels
):
    # The slow machine's esault run at 30ffa26, 40.7 s: by busy time a channel did 247 rec/s, but
    # with a backlog throughout 2 channels delivered 345 (each batch's fixed part included).
    ctl = controller(drain_within_band=True, **STREAM_POLICY_BAND)
    before = state_with(
        busy_rate_samples_rps=[247.0],
        steady_input=SteadyInput(since_s=21.0, low_rps=255.0, high_rps=255.0, rose=True),
        scaled_out_at_s=21.0,
    )
    period = the_first_period_after_settling_at_2_channels(799.0, throughput_rps=delivered_rps)
    _, decision = ctl.decide(before, period, 40.7)
    # below: 799 / (172.5 x 0.9) = 5.1 plus 7,506 records in 20 s at 172.5 = 2.2 -> 8 (by the busy
    # time's 247: 3.6 + 1.5 = 5.1 -> 6, which the run then took 40 s to outgrow again). above: the
    # lower busy-time rate, 247, sizes it.
    assert decision.to_channels == to_channels, decision.reason
    assert f"at {min(247.0, delivered_rps / 2):,.0f} rec/s per channel" in decision.reason


@pytest.mark.parametrize(
    ("busy_share", "samples", "to_channels", "sized_by"),
    [(0.37, [246.0], 3, 197.0), (0.37, [], 3, 197.0), (0.6, [246.0], 8, 89.0)],
    ids=["idle-channels", "idle-channels-no-sample-yet", "busy-channels"],
)
def test_an_outgrown_layout_whose_channels_idled_is_sized_by_busy_time_not_by_what_they_delivered(
    busy_share, samples, to_channels, sized_by
):
    # Square's run 2 with one core busy at fdc2c1e, 50.5 s: the input's step crossed the period, so
    # its 2 channels were behind at its end but had delivered 178 rec/s, busy 37 % of the time.
    # By the delivered 89 a channel: 2 -> 8, where 6 carried the high phase. By busy time, 246 rec/s
    # net of the least overhead (20 %): 197. Without a busy-time sample (no period busy half the
    # time), the period's own busy-time ceiling stands in. Busy channels' delivered rate still counts.
    ctl = controller(drain_within_band=True, busy_rate_min_share=0.5, **STREAM_POLICY_BAND)
    before = state_with(busy_rate_samples_rps=samples, batch_overhead_shares=[0.49, 0.2])
    behind = dataclasses.replace(
        the_first_period_after_settling_at_2_channels(464.0, throughput_rps=178.0),
        time_s=50.5,
        total_lag_records=2_650.0,
        batch_cycle_s=None,
        busy_share=np.array([busy_share, busy_share]),
        busy_ceiling_rps=246.0,
    )
    _, decision = ctl.decide(before, behind, 50.5)
    assert decision.to_channels == to_channels, decision.reason
    assert f"at {sized_by:,.0f} rec/s per channel" in decision.reason


@pytest.mark.parametrize(
    ("recent_input_rps", "to_channels"), [(None, 4), (672.0, 6)], ids=["period-average-only", "input-of-now"]
)
def test_an_outgrown_layout_is_sized_for_the_input_of_now_not_the_period_a_step_crossed(recent_input_rps, to_channels):
    # Square's run 2 with one core busy at 8b61701, 50.0 s: the input stepped from 160 to 800 rec/s
    # 2 s before the tick, so the period averaged 423. Sized by that, 2 -> 4, and 4 -> 6 followed
    # 32 s later with all 4 channels overloaded (SLO attainment 0.920). The last 2.5 s of input
    # (672: half a second of them before the step) size it as every later high phase went: 6.
    ctl = controller(drain_within_band=True, busy_rate_min_share=0.5, **STREAM_POLICY_BAND)
    before = state_with(channel_capacity_rps=171.0, capacity_samples_rps=[171.0])
    behind = dataclasses.replace(
        the_first_period_after_settling_at_2_channels(423.0, throughput_rps=210.0),
        time_s=50.0,
        total_lag_records=2_048.0,
        batch_cycle_s=3.81,
        recent_input_rate_rps=recent_input_rps,
    )
    _, decision = ctl.decide(before, behind, 50.0)
    assert decision.action == "scale_out" and decision.to_channels == to_channels, decision.reason
    assert ("672 in its last seconds" in decision.reason) == (recent_input_rps is not None), decision.reason


def test_an_outgrown_layout_that_processed_nothing_and_has_no_estimate_steps_one_level():
    # Stalled (idle past the pause bound, so judged) before any capacity was read: no rate to size
    # by, and dividing by it must not stop the sensor.
    ctl = controller(drain_within_band=True, **STREAM_POLICY_BAND)
    stalled = the_first_period_after_settling_at_2_channels(799.0, throughput_rps=0.0)
    _, decision = ctl.decide(state_with(), stalled, 40.7)
    assert decision.action == "scale_out" and decision.to_channels == 3, decision.reason


def test_an_outgrown_layout_is_only_scaled_out_never_judged_by_p5():
    # 4 channels just added, some still cold: 298 rec/s, less than 2 channels did congested. The
    # ready path would take that for remote congestion (P5) and go back to 2.
    ctl = controller(drain_within_band=True, **STREAM_POLICY_BAND)
    state = state_with({2: (331.0, True)}, channel_capacity_rps=166.0, capacity_samples_rps=[166.0])
    cold = make_evaluation(
        4, ready_up=False, after_rescale=True, outpaced=True, throughput_rps=298.0, input_rate_rps=800.0
    )
    _, decision = ctl.decide(state, cold, 60.0)
    # Sized by the known capacity, not the cold period: 800 / (166 x 0.9) = 5.4 -> 6.
    assert decision.action == "scale_out" and decision.to_channels == 6, decision.reason
    ready = dataclasses.replace(cold, ready_up=True, congestion=dataclasses.replace(cold.congestion, congested=True))
    _, decision = ctl.decide(state, ready, 60.0)
    assert decision.rule == "P5"  # what the early path must not do


@pytest.mark.parametrize(
    ("input_rps", "outpaced", "after_rescale"),
    [(796.0, False, True), (796.0, True, False)],
    ids=["not-outpaced", "first-layout-cold-start"],
)
def test_a_refilling_layout_that_is_not_outgrown_waits_for_its_windows(input_rps, outpaced, after_rescale):
    ctl = controller(drain_within_band=True, **STREAM_POLICY_BAND)
    ev = the_first_period_after_settling_at_2_channels(input_rps, outpaced=outpaced, after_rescale=after_rescale)
    _, decision = ctl.decide(state_with(), ev, 39.6)
    assert decision.action == "none" and decision.rule == "warmup", decision.reason


@pytest.mark.parametrize(
    ("periods_judged", "measured", "busy_rates", "to_channels"),
    [(2, True, [], 2), (2, True, [100.0, 100.0], 4), (1, True, [], None), (2, False, [], None)],
    ids=["second-judged-period", "sized-by-busy-time", "first-judged-period-still-cold", "busy-time-unmeasured"],
)
def test_a_first_layout_outpaced_after_its_cold_start_scales_out_before_its_windows_refill(
    periods_judged, measured, busy_rates, to_channels
):
    # A slow machine's eSault run at 66cbdda, 21.0 s: the cold start masked two periods, the one
    # channel's second judged period took in 250 rec/s and delivered 40 with 1,576 records behind.
    # The windows refilled at 26.4 s, and P1 took the same 1 -> 2 then. Sized as P1/P6 size it: one
    # level with no capacity known, else by the busy-time stand-in, not by the cold period's 40.
    ctl = controller(drain_within_band=True, **STREAM_POLICY_BAND)
    ev = make_evaluation(
        1,
        time_s=21.0,
        ready_up=False,
        ready_down=False,
        outpaced=True,
        throughput_rps=40.0,
        input_rate_rps=250.0,
        lag_records=1_576.0,
        batch_cycle_s=7.6,
        busy_share=[0.2] if measured else None,
        periods_judged=periods_judged,
    )
    _, decision = ctl.decide(state_with(busy_rate_samples_rps=busy_rates), ev, 21.0)
    if to_channels is None:
        assert decision.action == "none" and decision.rule == "warmup", decision.reason
    else:
        assert decision.action == "scale_out" and decision.to_channels == to_channels, decision.reason


def test_a_first_layout_with_a_hot_channel_waits_for_its_windows_to_judge_the_skew():
    # The e2e Zipf load on 2 channels: channel 0 busy throughout with 2.3 times the other's records.
    ctl = controller(drain_within_band=True, **STREAM_POLICY_BAND)
    ev = make_evaluation(
        2,
        ready_up=False,
        ready_down=False,
        outpaced=True,
        throughput_rps=357.0,
        input_rate_rps=480.0,
        lag_records=3_000.0,
        busy_share=[1.0, 0.5],
        channel_throughput_rps=[250.0, 107.0],
        periods_judged=2,
    )
    _, decision = ctl.decide(state_with(), ev, 21.0)
    assert decision.action == "none" and decision.rule == "warmup", decision.reason


def a_masked_period(channels: int, time_s: float, outrun: bool, **numbers) -> object:
    """A period that is no evidence (settling, or awaiting a layout), outrun or not, with its numbers."""
    return make_evaluation(
        channels, time_s=time_s, ready_up=False, ready_down=False, settling=True, outrun=outrun, **numbers
    )


@pytest.mark.parametrize("outrun", [True, False], ids=["outrun", "not-outrun"])
def test_a_layout_outrun_in_its_first_batch_scales_out_in_its_settling_period(outrun):
    # eSault at 4d24df3, run 1, 36.4 s: the first 2-channel batch delivered 342 rec/s with 6,911
    # records behind and 558 coming in, beyond the 488 its channels do busy all the time. The run
    # waited for the next period and decided 2 -> 8 at 41.7 s.
    ctl = controller(drain_within_band=True, **STREAM_POLICY_BAND)
    before = state_with(
        steady_input=SteadyInput(since_s=20.7, low_rps=248.0, high_rps=248.0, rose=True), scaled_out_at_s=20.7
    )
    first_batch = a_masked_period(
        2,
        36.4,
        outrun,
        throughput_rps=342.0,
        input_rate_rps=558.0,
        lag_records=6_911.0,
        after_rescale=True,
        batch_cycle_s=8.8,
    )
    state, decision = ctl.decide(before, first_batch, 36.4)
    if not outrun:
        assert decision.action == "none" and decision.rule == "settling", decision.reason
        return
    # Sized by what it delivered: 558 / (171 x 0.9) = 3.6 channels, plus all 6,911 records behind
    # drained in 20 s at 171 = 2.0 -> 5.6 -> 6.
    assert decision.action == "scale_out" and decision.to_channels == 6, decision.reason
    assert "outgrown while settling" in decision.reason and decision.signals["outgrown"] == 1.0
    assert state.history == {} and state.pending is not None


def awaiting_two_channels(outrun: bool) -> object:
    """A tick of the slow machine's eSault run at ~31 s: 1 -> 2 committed (epoch 1), its first batch
    still running, the input stepped to 533 rec/s; the one channel's last batch delivered 112."""
    ev = a_masked_period(1, 31.0, outrun, throughput_rps=112.0, input_rate_rps=533.0, lag_records=3_000.0)
    return dataclasses.replace(ev, awaited=CommittedLayout(epoch=1, channels=2), busy_ceiling_rps=246.0)


def test_a_committed_layout_the_input_outruns_is_scaled_out_before_its_first_batch():
    ctl = controller(drain_within_band=True, **STREAM_POLICY_BAND)
    decided = state_with(
        pending=PendingRescale(from_channels=1, to_channels=2, from_epoch=0, decided_at_s=21.0),
        cooldown_until_s=26.0,
        steady_input=SteadyInput(since_s=21.0, low_rps=250.0, high_rps=250.0, rose=True),
        scaled_out_at_s=21.0,
    )
    state, decision = ctl.decide(decided, awaiting_two_channels(outrun=True), 31.0)
    # From the committed 2 channels, sized by what the one channel delivered: 533 / (112 x 0.9) =
    # 5.3 -> 6, the drain of 3,000 records within the band P2 keeps (533 / (112 x 0.8) = 5.9 -> 6).
    assert (decision.action, decision.from_channels, decision.to_channels) == ("scale_out", 2, 6), decision.reason
    assert "outgrown before its first batch" in decision.reason and "(246 rec/s each)" in decision.reason
    # The 1 -> 2 committed; the new rescale is pending from the committed layout.
    assert state.pending == PendingRescale(from_channels=2, to_channels=6, from_epoch=1, decided_at_s=31.0)
    # The next tick still awaits epoch 1: one rescale at a time.
    _, again = ctl.decide(state, awaiting_two_channels(outrun=True), 41.0)
    assert again.action == "none" and again.rule == "in_flight" and "has not committed yet" in again.reason


def test_a_committed_layout_the_input_does_not_outrun_is_awaited():
    ctl = controller(drain_within_band=True, **STREAM_POLICY_BAND)
    state, decision = ctl.decide(state_with(), awaiting_two_channels(outrun=False), 31.0)
    assert decision.action == "none" and decision.rule == "awaiting"
    assert decision.reason == "waiting for the first batch of layout epoch 1 (2 channels)"
    assert state.history == {} and state.pending is None


# ------------------------------------------------------------------ rescales in flight, pause and settling
def test_a_rescale_in_flight_is_answered_by_no_other_decision_until_it_lands_or_times_out():
    ctl = controller(cooldown_s=5.0, rescale_timeout_s=60.0)
    congested = make_evaluation(8, congested=True, overloaded=range(8))
    state, first = ctl.decide(state_with(), congested, 100.0)
    assert first.is_rescale and state.pending is not None and state.pending.to_channels == 12
    # Cooled down, still congested, but the snapshots still show the old layout: in flight.
    state, waiting = ctl.decide(state, congested, 110.0)
    assert waiting.action == "none" and waiting.rule == "in_flight"
    # The new layout shows up: the pending rescale is done and the controller judges again.
    landed, decision = ctl.decide(state, make_evaluation(12, layout_epoch=1, ready_up=False), 111.0)
    assert landed.pending is None and decision.rule == "warmup"
    # A rescale that never shows up is presumed failed after rescale_timeout_s.
    _, retried = ctl.decide(state, congested, 160.0)
    assert retried.is_rescale


def test_a_settling_period_is_no_evidence_and_no_decision():
    ev = make_evaluation(
        8,
        congested=True,
        overloaded=range(8),
        throughput_rps=0.0,
        settling=True,
        after_rescale=True,
        rescale_pause_s=5.0,
    )
    state, decision = controller().decide(state_with({4: (4000.0, True)}), ev, 100.0)
    assert decision.action == "none" and decision.rule == "settling" and "5.0 s" in decision.reason
    cold = make_evaluation(8, congested=True, overloaded=range(8), throughput_rps=0.0, settling=True)
    _, decision = controller().decide(state_with(), cold, 100.0)
    assert decision.rule == "settling" and "cold start" in decision.reason
    assert set(state.history) == {lvl(4)} and state.capacity_floor_rps is None


def test_after_a_costly_rescale_p2_waits_for_a_lasting_fall_that_pays_the_pause_back():
    # A 5 s pause and scale_in_dwell_factor 4: the input must hold steady 20 s, and the scale-in
    # must save at least a quarter of the channels.
    ctl = controller(cooldown_s=0.0)
    state = state_with(channel_capacity_rps=1000.0)
    decisions = []
    for t in range(25):
        ev = make_evaluation(32, throughput_rps=5000.0, lag_records=0.0, rescale_pause_s=5.0, time_s=100.0 + t)
        state, decision = ctl.decide(state, ev, 100.0 + t)
        decisions.append(decision)
    first = next(i for i, d in enumerate(decisions) if d.is_rescale)
    assert first == 20 and decisions[first].to_channels == 12  # 5000 / 700 + 5 x 5000 / 20000 = 8.4 -> 12
    assert "held steady for 20 s" in decisions[0].reason
    # From 16 channels, 12 would save a quarter: worth it; from 14 it would not.
    steady = state.model_copy(update={"pending": None})
    ev = make_evaluation(14, throughput_rps=5000.0, lag_records=0.0, rescale_pause_s=5.0, time_s=130.0)
    _, decision = ctl.decide(steady, ev, 130.0)
    assert decision.action == "none" and "not worth a 5.0 s pause" in decision.reason
