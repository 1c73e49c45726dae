"""The loop collect -> evaluate -> decide -> realize with a scripted collector and the recording realizer."""

from __future__ import annotations

import pytest

from elasticity.control.clock import ManualClock, SystemClock
from elasticity.control.decision import Decision
from elasticity.control.loop import ElasticLoop, LoopState, RecordingRealizer
from elasticity.control.options import ControllerOptions, ControlOptions, SettlingOptions
from tests.fakes.control import ScriptedCollector, make_snapshot

OPTIONS = ControlOptions(controller=ControllerOptions(max_channels=64, cooldown_s=5.0))


def congested_script(channels: int = 4, ticks: int = 8) -> list:
    # Every channel saturated at 1000 rec/s, latency and lag growing: 8000 rec/s arrive.
    return [
        make_snapshot(float(t), [1.0 + t] * channels, [1000.0] * channels, input_rate_rps=8000.0, lag=4000.0 * (t + 1))
        for t in range(ticks)
    ]


def run_loop(loop: ElasticLoop, clock: ManualClock, ticks: int) -> list[Decision]:
    decisions = []
    for _ in range(ticks):
        decisions.append(loop.tick())
        clock.advance(1.0)
    return decisions


def test_loop_realizes_a_scale_out_once_and_waits_for_it_to_land():
    clock = ManualClock()
    realizer = RecordingRealizer()
    loop = ElasticLoop(OPTIONS, ScriptedCollector(congested_script()), realizer, clock)
    decisions = run_loop(loop, clock, 8)
    assert [d.rule for d in decisions[:2]] == ["warmup", "warmup"]
    realized = realizer.decisions[0]
    assert realized.action == "scale_out" and realized.from_channels == 4 and realized.time_s == 2.0
    # 8000 rec/s over 1000 rec/s per channel (measured in the saturated periods) at 70% -> 11.4,
    # plus 12000 records of lag drained in 20 s -> 12.03 -> the level of 16 channels.
    assert realized.to_channels == 16
    # The recording realizer changed nothing: the snapshots still show the 4 channels of the old
    # layout, so the rescale is in flight and no second one answers the same congestion.
    assert all(d.rule == "in_flight" for d in decisions[3:])
    assert [d.time_s for d in realizer.decisions] == [2.0]


def test_a_failing_realizer_leaves_the_state_unchanged_so_the_next_tick_retries():
    class FailingRealizer:
        def __init__(self) -> None:
            self.calls = 0

        def apply(self, decision: Decision) -> None:
            self.calls += 1
            raise RuntimeError("rescale run could not be requested")

    clock = ManualClock()
    realizer = FailingRealizer()
    loop = ElasticLoop(OPTIONS, ScriptedCollector(congested_script()), realizer, clock)
    run_loop(loop, clock, 2)
    before = loop.state_json()
    with pytest.raises(RuntimeError):
        loop.tick()
    assert loop.state_json() == before
    clock.advance(1.0)
    with pytest.raises(RuntimeError):
        loop.tick()  # not cooling down: it decides (and tries) again
    assert realizer.calls == 2


def test_state_saved_as_json_mid_run_gives_the_same_decisions_as_an_uninterrupted_loop():
    script = congested_script(ticks=12)
    clock_a, clock_b = ManualClock(), ManualClock()
    uninterrupted = ElasticLoop(OPTIONS, ScriptedCollector(script), RecordingRealizer(), clock_a)
    expected = run_loop(uninterrupted, clock_a, 12)

    first_half = ElasticLoop(OPTIONS, ScriptedCollector(script), RecordingRealizer(), clock_b)
    got = run_loop(first_half, clock_b, 2)
    cursor = first_half.state_json()  # what a Dagster sensor keeps between evaluations
    collector = ScriptedCollector(script)
    collector.collected = 2
    second_half = ElasticLoop(OPTIONS, collector, RecordingRealizer(), clock_b, LoopState.from_json(cursor, OPTIONS))
    got += run_loop(second_half, clock_b, 10)
    assert [(d.action, d.to_channels, d.rule) for d in got] == [(d.action, d.to_channels, d.rule) for d in expected]


class OneSnapshot:
    """A collector that returns the snapshot it was given (a sensor's tick reads one)."""

    def __init__(self, snapshot) -> None:
        self.snapshot = snapshot

    def collect(self, now_s: float):
        return self.snapshot


def sensor_tick(options, state: LoopState, snapshot, now_s: float):
    """What a Dagster sensor does per evaluation: a loop restored from its cursor, one tick."""
    loop = ElasticLoop(options, OneSnapshot(snapshot), RecordingRealizer(), ManualClock(now_s), state)
    decision = loop.tick()
    return loop.state, loop.last_evaluation, decision


def test_a_loop_restored_from_its_cursor_every_tick_decides_as_a_long_running_one():
    state = LoopState.from_json(None, OPTIONS)
    decisions = []
    for t, snapshot in enumerate(congested_script()):
        state, evaluation, decision = sensor_tick(OPTIONS, LoopState.from_json(state.to_json(), OPTIONS), snapshot, t)
        decisions.append(decision)
    assert evaluation.channels == 4
    assert [t for t, d in enumerate(decisions) if d.action == "scale_out"] == [2]


def test_a_load_that_falls_while_a_scale_out_settles_is_scaled_back_in():
    # 1 channel overloaded under 294 rec/s, its first loaded batch stalled past max_pause_s (3 s
    # here; nothing processed, so judged from t=4 on); then at 2 channels the backlog drains and
    # only 20 rec/s arrive.
    options = ControlOptions(
        controller=ControllerOptions(max_channels=6, cooldown_s=5.0), settling=SettlingOptions(max_pause_s=3.0)
    )
    one = [make_snapshot(float(t), [2.0 + 2 * t], [0.0], input_rate_rps=294.0, lag=1500.0 * (t + 1)) for t in range(8)]
    drain = [
        make_snapshot(
            8.0 + t, [8.0 - 3 * t] * 2, [190.0] * 2, input_rate_rps=20.0, lag=4000.0 / (t + 1), layout_epoch=1
        )
        for t in range(2)
    ]
    low = [make_snapshot(10.0 + t, [0.2] * 2, [10.0] * 2, input_rate_rps=20.0, layout_epoch=1) for t in range(40)]
    state = LoopState.from_json(None, options)
    rescales = []
    for snapshot in one + drain + low:
        if rescales and snapshot.layout_epoch == 0:
            continue  # the scale-out happened: the stream moves on to 2 channels
        state, _, decision = sensor_tick(options, state, snapshot, snapshot.time_s)
        if decision.is_rescale:
            rescales.append((decision.action, decision.from_channels, decision.to_channels))
    # (The script stays at 2 channels after the scale-in, so only the first two count.)
    assert rescales[:2] == [("scale_out", 1, 2), ("scale_in", 2, 1)]


def test_clocks():
    clock = ManualClock(10.0)
    assert clock.advance(2.5) == 12.5
    with pytest.raises(ValueError):
        clock.advance(-1.0)
    system = SystemClock()
    assert system.now() <= system.now()


def test_the_pause_of_a_scale_out_is_not_read_as_a_scale_out_that_lost_throughput():
    # 4 saturated channels scale out to 16 at t=2; the rescale then stops processing for 5 s
    # (0 rec/s while the lag grows), and the 16 channels drain the backlog afterwards. The pause
    # is not P5's "the level above did no better" and the stage is not scaled back in.
    # No cooldown: nothing but the masking of the pause and settling keeps P5 from deciding.
    options = ControlOptions(controller=ControllerOptions(max_channels=64, cooldown_s=0.0))
    before = congested_script(ticks=3)
    paused = [
        make_snapshot(
            3.0 + t, [3.0 + t] * 16, [0.0] * 16, input_rate_rps=8000.0, lag=20000.0 + 8000 * t, layout_epoch=1
        )
        for t in range(5)
    ]
    drain = [
        make_snapshot(
            8.0 + t,
            [0.05 + max(0.0, 52000.0 - 8000 * t) / 16000] * 16,
            [1000.0] * 16,
            input_rate_rps=8000.0,
            lag=max(0.0, 52000.0 - 8000 * t),
            layout_epoch=1,
        )
        for t in range(20)
    ]
    state = LoopState.from_json(None, options)
    decisions = []
    for snapshot in before + paused + drain:
        state, evaluation, decision = sensor_tick(options, state, snapshot, snapshot.time_s)
        decisions.append(decision)
    assert [(d.action, d.to_channels) for d in decisions if d.is_rescale] == [("scale_out", 16)]
    # t=3..7 paused, t=8 resumed (holds the pause's end), t=9..13 settle (1 x the 5 s pause).
    assert {d.rule for d in decisions[3:14]} == {"settling"} and decisions[14].rule == "warmup"
    assert evaluation.rescale_pause_s == 5.0
