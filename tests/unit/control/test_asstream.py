"""As-Stream's pure core (seed 002): Eq. 5–11 on hand-computed cases, Table 5, degenerate input, properties."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from elasticity.control.asstream import (
    AsStreamOptions,
    ParameterPlanPolicy,
    PlanningPolicy,
    StageCost,
    StageLink,
    StageMonitoring,
    StageParallelism,
    StageSample,
    Topology,
    channels_needed,
    communication_time,
    fit_latency_line,
    identify_bottlenecks,
    identify_stage,
    mean_selectivity,
    parameter_plan,
    plan_stages,
    planning_policy,
    pre_scale,
    predict_next_inputs,
    reference_time,
)
from elasticity.layout import MAX_CHANNELS

OPTIONS = AsStreamOptions(monitoring_period_s=60.0, bottleneck_interval_s=10.0, min_recurrences=2)


def monitoring(stage: str, times: list[float], latencies: list[float]) -> StageMonitoring:
    return StageMonitoring.of(stage, (StageSample(t, g) for t, g in zip(times, latencies)))


def windows(stage: str, rows: list[tuple[float, float]], queued_out: float = 0.0) -> StageMonitoring:
    """Samples one second apart with (rows_in, rows_out); the last one carries the output queue."""
    last = len(rows) - 1
    return StageMonitoring.of(
        stage,
        (
            StageSample(float(t), 0.01, rows_in=i, rows_out=o, rows_queued_out=queued_out if t == last else 0.0)
            for t, (i, o) in enumerate(rows)
        ),
    )


# A crafted latency series, built so that its least-squares line is known by hand:
# gamma(t) = 1 + 0.1 t + spike(t) at t = 0, 1, ..., 29 and at t = 14.5 (31 points, symmetric
# about t_bar = 14.5). The fit is linear in gamma, so the trend 1 + 0.1 t fits itself exactly
# and the spikes, symmetric about t_bar (6 at t = 2 and 27, 4 at t = 3 and 26, 11 at 14.5), add
# slope 0 and intercept mean(spike) = (6 + 4 + 11 + 4 + 6) / 31 = 31 / 31 = 1:
#   f(t) = 2 + 0.1 t;  unspiked points lie 1 below it, spiked ones above.
SPIKES = {2.0: 6.0, 3.0: 4.0, 14.5: 11.0, 26.0: 4.0, 27.0: 6.0}
CRAFTED_TIMES = sorted([float(t) for t in range(30)] + [14.5])


def crafted(stage: str, scale: float = 1.0) -> StageMonitoring:
    return monitoring(stage, CRAFTED_TIMES, [scale * (1 + 0.1 * t + SPIKES.get(t, 0.0)) for t in CRAFTED_TIMES])


def linear(stage: str, slope: float = 0.5, intercept: float = 2.0, points: int = 10) -> StageMonitoring:
    times = [float(t) for t in range(points)]
    return monitoring(stage, times, [intercept + slope * t for t in times])


# ------------------------------------------------------------------ Eq. 4-5
def test_reference_time_is_the_larger_of_the_compute_and_communication_sums():
    # Eq. 4: 1/2 (100/50 + 100/25) = 1/2 (2 + 4) = 3.
    assert communication_time(100.0, 50.0, 25.0) == pytest.approx(3.0)
    # Eq. 5: compute 0.2 + 0.5 = 0.7, communication 0.3 + 0.1 = 0.4 -> T = 0.7; swapped -> still the larger.
    assert reference_time([StageCost(0.2, 0.3), StageCost(0.5, 0.1)]) == pytest.approx(0.7)
    assert reference_time([StageCost(0.1, 0.6), StageCost(0.1, 0.5)]) == pytest.approx(1.1)
    assert reference_time([]) == 0.0


# ------------------------------------------------------------------ Eq. 6-8
def test_least_squares_line_on_four_hand_computed_points():
    # (t, gamma) = (0, 1), (1, 3), (2, 2), (3, 6); M = 4, t_bar = 1.5, gamma_bar = 3.
    # Eq. 8 numerator:   sum gamma_i (t_i - t_bar) = 1(-1.5) + 3(-0.5) + 2(0.5) + 6(1.5) = 7
    # Eq. 8 denominator: sum t_i^2 - (sum t_i)^2 / M = 14 - 36 / 4 = 5          -> omega = 7/5 = 1.4
    # b = (1/M) sum (gamma_i - omega t_i) = 3 - 1.4 * 1.5 = 0.9
    # f = 0.9, 2.3, 3.7, 5.1; residuals gamma - f = 0.1, 0.7, -1.7, 0.9
    # Eq. 6: e = (0.01 + 0.49 + 2.89 + 0.81) / 4 = 1.05
    line = fit_latency_line(np.array([0.0, 1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0, 6.0]))
    assert line is not None
    assert line.slope == pytest.approx(1.4) and line.intercept == pytest.approx(0.9)
    assert line.mean_squared_error == pytest.approx(1.05) and line.points == 4


def test_least_squares_line_survives_epoch_second_timestamps():
    # The same four points 1.7e9 s later: same slope, f at each point unchanged.
    epoch = 1.7e9
    times = np.array([0.0, 1.0, 2.0, 3.0]) + epoch
    line = fit_latency_line(times, np.array([1.0, 3.0, 2.0, 6.0]))
    assert line is not None
    assert line.slope == pytest.approx(1.4, rel=1e-9)
    np.testing.assert_allclose(line.at(times), [0.9, 2.3, 3.7, 5.1], rtol=1e-6)


def test_the_crafted_series_fits_the_hand_computed_line():
    line = identify_stage(crafted("x"), None, OPTIONS).line
    assert line is not None
    assert line.slope == pytest.approx(0.1) and line.intercept == pytest.approx(2.0)


# ------------------------------------------------------------------ step 5-6: effective values, T_bottleneck
def test_effective_values_and_t_bottleneck_per_interval_on_the_crafted_series():
    stage = identify_stage(crafted("x"), None, OPTIONS)
    # Above f(t) = 2 + 0.1 t: exactly the spiked points, and f at those points is the value (step 5).
    values = [v for i in stage.intervals for v in i.values]
    assert [v.time_s for v in values] == [2.0, 3.0, 14.5, 26.0, 27.0]
    assert [v.value_s for v in values] == pytest.approx([2.2, 2.3, 3.45, 4.6, 4.7])
    # Intervals of 10 s from t = 0: [0,10) holds f(2), f(3) -> T_bottleneck 2.3, recurs twice, counts;
    # [10,20) holds f(14.5) alone -> below min_recurrences = 2, does not count; [20,30) -> 4.7, counts.
    assert [(i.start_s, i.recurrences, i.counts) for i in stage.intervals] == [
        (0.0, 2, True),
        (10.0, 1, False),
        (20.0, 2, True),
    ]
    assert [i.t_bottleneck_s for i in stage.intervals] == pytest.approx([2.3, 3.45, 4.7])
    assert stage.bottleneck_time_s == pytest.approx(4.7)


def test_observed_values_use_the_measured_latency_instead_of_the_line():
    stage = identify_stage(crafted("x"), None, OPTIONS.model_copy(update={"bottleneck_value": "observed"}))
    # gamma(2) = 1 + 0.2 + 6 = 7.2, gamma(3) = 1.3 + 4 = 5.3; gamma(26) = 3.6 + 4 = 7.6, gamma(27) = 3.7 + 6 = 9.7.
    assert [i.t_bottleneck_s for i in stage.intervals] == pytest.approx([7.2, 13.45, 9.7])
    assert stage.bottleneck_time_s == pytest.approx(9.7)


def test_a_single_recurrence_suffices_when_the_threshold_is_one():
    stage = identify_stage(crafted("x"), None, OPTIONS.model_copy(update={"min_recurrences": 1}))
    assert all(i.counts for i in stage.intervals)


def test_t_bottleneck_must_be_of_the_order_of_t():
    # factor 10: T = 1 admits [0.1, 10] (4.7 counts); T = 100 admits [10, 1000] (nothing counts).
    assert identify_stage(crafted("x"), 1.0, OPTIONS).bottleneck_time_s == pytest.approx(4.7)
    assert identify_stage(crafted("x"), 100.0, OPTIONS).bottleneck_time_s is None
    # T = 0.5 admits [0.05, 5]: 4.7 still counts; T = 0.4 admits [0.04, 4]: the [20,30) interval
    # (4.7) drops out and the [0,10) one (2.3) is the stage's entry.
    assert identify_stage(crafted("x"), 0.5, OPTIONS).bottleneck_time_s == pytest.approx(4.7)
    assert identify_stage(crafted("x"), 0.4, OPTIONS).bottleneck_time_s == pytest.approx(2.3)


def test_samples_before_the_monitoring_period_are_ignored():
    # Period 15 s ending at t = 29 keeps t >= 14: the [0,10) spikes are gone, the line is refitted on 14..29.
    stage = identify_stage(crafted("x"), None, OPTIONS.model_copy(update={"monitoring_period_s": 15.0}))
    assert stage.line is not None and stage.line.points == 17  # 14, 14.5, 15, ..., 29
    assert all(v.time_s >= 14.0 for i in stage.intervals for v in i.values)


# ------------------------------------------------------------------ step 6: levels and ranking
def test_three_stages_are_ranked_by_bottleneck_time_and_get_levels_k_to_1():
    # Scaling gamma by k scales the line and every value by k: entries 4.7, 9.4, 14.1 -> levels 1, 2, 3.
    report = identify_bottlenecks([crafted("split", 1.0), crafted("count", 3.0), crafted("parse", 2.0)], OPTIONS)
    assert report.ranking == ("count", "parse", "split")
    assert [report.level_of(s) for s in report.ranking] == [3, 2, 1]
    assert report.bottleneck_stage == "count"


def test_a_stage_without_bottleneck_values_has_level_zero_and_ranks_last():
    report = identify_bottlenecks([linear("calm"), crafted("busy")], OPTIONS)
    assert report.ranking == ("busy", "calm")
    assert (report.level_of("busy"), report.level_of("calm")) == (1, 0)


def test_the_order_of_t_can_reorder_the_ranking():
    # T = 0.5 admits [0.05, 5]: "x" keeps 4.7; "y" (x2) loses its 9.4 interval, keeps [0,10) at 4.6 -> below x.
    report = identify_bottlenecks([crafted("x"), crafted("y", 2.0)], OPTIONS, reference_time_s=0.5)
    assert report.ranking == ("x", "y")
    assert report.stages[1].bottleneck_time_s == pytest.approx(4.6)


def test_equal_bottleneck_times_share_a_level():
    report = identify_bottlenecks([crafted("a"), crafted("b"), crafted("c", 2.0)], OPTIONS)
    assert [(s.stage, s.level) for s in report.stages] == [("c", 2), ("a", 1), ("b", 1)]


# ------------------------------------------------------------------ degenerate input
def test_no_samples_give_no_line_and_level_zero():
    report = identify_bottlenecks([StageMonitoring("empty", ())], OPTIONS)
    (stage,) = report.stages
    assert stage.line is None and stage.intervals == () and stage.level == 0
    assert report.bottleneck_stage is None


def test_one_sample_gives_the_horizontal_line_through_it_and_no_values():
    stage = identify_stage(monitoring("one", [5.0], [0.3]), None, OPTIONS)
    assert stage.line is not None and (stage.line.slope, stage.line.intercept) == (0.0, pytest.approx(0.3))
    assert stage.intervals == ()


def test_samples_all_at_one_time_give_the_horizontal_line_through_their_mean():
    # (5, 1), (5, 3): the spread sum (t - t_bar)^2 is 0; omega = 0, b = mean = 2, e = (1 + 1) / 2 = 1.
    stage = identify_stage(monitoring("same", [5.0, 5.0], [1.0, 3.0]), None, OPTIONS)
    assert stage.line is not None
    assert (stage.line.slope, stage.line.intercept, stage.line.mean_squared_error) == (0.0, 2.0, 1.0)
    assert [(v.latency_s, v.value_s) for i in stage.intervals for v in i.values] == [(3.0, 2.0)]


def test_points_on_the_line_are_not_above_it():
    report = identify_bottlenecks([linear("exact", slope=0.37, intercept=1.1, points=50)], OPTIONS)
    assert report.stages[0].intervals == () and report.bottleneck_stage is None


def test_invalid_samples_and_topologies_are_rejected_with_a_reason():
    with pytest.raises(ValueError, match="mean_latency_s"):
        StageSample(0.0, math.nan)
    with pytest.raises(ValueError, match="time order"):
        monitoring("late", [2.0, 1.0], [0.1, 0.1])
    with pytest.raises(ValueError, match="reference time"):
        identify_bottlenecks([crafted("x")], OPTIONS, reference_time_s=0.0)
    with pytest.raises(ValueError, match="monitored twice"):
        identify_bottlenecks([crafted("x"), crafted("x", 2.0)], OPTIONS)
    with pytest.raises(ValueError, match="monitored twice"):
        predict_next_inputs(Topology.chain("x"), [windows("x", [(1, 1)]), windows("x", [(2, 2)])], OPTIONS)
    with pytest.raises(ValueError, match="not in the topology"):
        predict_next_inputs(Topology.chain("x"), [windows("y", [(1, 1)])], OPTIONS)
    with pytest.raises(ValueError, match="cycle"):
        Topology(("a", "b"), (StageLink("a", "b"), StageLink("b", "a")))
    with pytest.raises(ValueError, match="unknown stage"):
        Topology(("a",), (StageLink("a", "z"),))
    with pytest.raises(ValidationError):
        AsStreamOptions(min_channels=8, max_channels=4)
    with pytest.raises(ValidationError):
        AsStreamOptions(max_channels=MAX_CHANNELS + 1)


# ------------------------------------------------------------------ Eq. 9 and Table 5
# Table 5 in the header's column order: N_executer, N_task, N_bottleneck -> N'_task.
TABLE_5 = [(8, 16, 3, 22), (10, 10, 2, 12), (5, 10, 1, 12)]


@pytest.mark.parametrize(("executors", "tasks", "level", "expected"), TABLE_5)
def test_table_5_rows_hold_exactly(executors, tasks, level, expected):
    # e.g. row 1: (8 + 3) / 8 * 16 = 11 * 2 = 22, an exact integer (so are the other two rows).
    assert parameter_plan(1.0, executors, level, tasks) == expected
    assert ParameterPlanPolicy().new_tasks(executors, level, tasks) == expected


def test_the_header_order_is_the_only_reading_under_which_all_of_table_5_holds():
    readings = []
    for order in itertools.permutations(range(3)):
        rows = [[row[i] for i in order] for row in TABLE_5]
        if all(parameter_plan(1.0, e, lvl, n) == row[3] for (e, n, lvl), row in zip(rows, TABLE_5)):
            readings.append(order)
    assert readings == [(0, 1, 2)]


def test_identified_levels_3_2_1_reproduce_table_5_through_plan_stages():
    report = identify_bottlenecks([crafted("a", 3.0), crafted("b", 2.0), crafted("c", 1.0)], OPTIONS)
    parallelism = [StageParallelism("a", 8, 16), StageParallelism("b", 10, 10), StageParallelism("c", 5, 10)]
    plans = plan_stages(report, parallelism, planning_policy(OPTIONS))
    assert [(p.stage, p.bottleneck_level, p.new_tasks) for p in plans] == [("a", 3, 22), ("b", 2, 12), ("c", 1, 12)]


def test_the_options_select_the_policy_and_carry_phi_and_the_bounds():
    policy = planning_policy(AsStreamOptions(phi=1.5, max_channels=30))
    assert isinstance(policy, PlanningPolicy)
    # 1.5 * (8 + 3) / 8 * 16 = 33, clamped to max_channels = 30.
    assert policy.new_tasks(8, 3, 16) == 30
    with pytest.raises(ValidationError):
        AsStreamOptions(planning_policy="bottleneck_first")


def test_fractional_plans_round_up_and_phi_is_exact():
    # (3 + 1) / 3 * 4 = 16/3 = 5.33 -> 6; phi 1.1 at level 0: 1.1 * 10 = 11 exactly (not 12 by round-off).
    assert ParameterPlanPolicy().new_tasks(3, 1, 4) == 6
    assert ParameterPlanPolicy(phi=1.1).new_tasks(10, 0, 10) == 11
    # phi 1.5: 1.5 * (8 + 3) / 8 * 16 = 33.
    assert ParameterPlanPolicy(phi=1.5).new_tasks(8, 3, 16) == 33


def test_plans_are_clamped_to_the_channel_bounds():
    # (1 + 3) / 1 * 300 = 1200 > MAX_CHANNELS = 1024; phi 0.1 * 4 = 0.4 -> 1, raised to min 2.
    assert ParameterPlanPolicy().new_tasks(1, 3, 300) == MAX_CHANNELS
    assert ParameterPlanPolicy(max_channels=64).new_tasks(1, 3, 300) == 64
    assert ParameterPlanPolicy(phi=0.1, min_channels=2).new_tasks(1, 0, 4) == 2
    with pytest.raises(ValueError):
        ParameterPlanPolicy().new_tasks(0, 1, 4)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 64), st.integers(1, 32), st.integers(1, 256), st.floats(1.0, 4.0))
def test_a_bottleneck_never_loses_tasks_when_phi_is_at_least_one(executors, level, tasks, phi):
    planned = ParameterPlanPolicy(phi=phi).new_tasks(executors, level, tasks)
    assert planned > tasks or planned == MAX_CHANNELS
    assert planned >= parameter_plan(phi, executors, level, tasks) or planned == MAX_CHANNELS


# ------------------------------------------------------------------ Eq. 10-11
def test_selectivity_is_the_mean_of_the_window_ratios():
    # 50/100, 100/200, 80/100 -> (0.5 + 0.5 + 0.8) / 3 = 0.6 (not the rate-weighted 230/400 = 0.575);
    # the window without input has no ratio; a stage with no input at all gets unknown_selectivity.
    assert mean_selectivity(windows("a", [(100, 50), (200, 100), (0, 0), (100, 80)]), OPTIONS) == pytest.approx(0.6)
    assert mean_selectivity(windows("idle", [(0, 0)]), OPTIONS.model_copy(update={"unknown_selectivity": 0.25})) == 0.25


def test_a_three_stage_chain_is_predicted_by_hand():
    # A: sel (0.5 + 0.5 + 0.8) / 3 = 0.6, latest D_in 100, q_out 10 -> D_out_A = 0.6 * 100 + 10 = 70.
    # B: sel 2, latest D_in 60, q_out 5 -> D_out_B = 2 * 60 + 5 = 125;  D_in_B(w+1) = min(70, inf) = 70.
    # C: D_in_C(w+1) = min(125, inf) = 125.  A is the source: its input is carried forward (100).
    stages = [
        windows("A", [(100, 50), (200, 100), (100, 80)], queued_out=10),
        windows("B", [(70, 140), (50, 100), (60, 120)], queued_out=5),
        windows("C", [(40, 40)]),
    ]
    prediction = predict_next_inputs(Topology.chain("A", "B", "C"), stages, OPTIONS)
    assert [p.stage for p in prediction.stages] == ["A", "B", "C"]
    assert [p.output_rows for p in prediction.stages[:2]] == pytest.approx([70.0, 125.0])
    assert [p.next_input_rows for p in prediction.stages] == pytest.approx([100.0, 70.0, 125.0])
    # A forecast for the source replaces the carried-forward input (the paper's virtual upstream).
    forecast = predict_next_inputs(Topology.chain("A", "B", "C"), stages, OPTIONS, source_input_rows={"A": 400.0})
    assert forecast.of("A").next_input_rows == 400.0 and forecast.of("B").next_input_rows == pytest.approx(70.0)


def test_an_offered_workload_is_d_in_of_eq_10_and_leaves_the_selectivity_alone():
    # A processed 100 rows of its latest window but 400 arrived (its input queue): D_in_A(w) = 400,
    # sel_A stays (0.5 + 0.5 + 0.8) / 3 = 0.6 from what it processed -> D_out_A = 0.6 * 400 + 10 = 250.
    stages = [windows("A", [(100, 50), (200, 100), (100, 80)], queued_out=10), windows("B", [(60, 120)])]
    prediction = predict_next_inputs(Topology.chain("A", "B"), stages, OPTIONS, offered_rows={"A": 400.0})
    assert prediction.of("A").selectivity == pytest.approx(0.6)
    assert prediction.of("A").rows_in == 400.0 and prediction.of("A").output_rows == pytest.approx(250.0)
    assert prediction.of("B").next_input_rows == pytest.approx(250.0)


def test_a_diamond_sums_its_upstreams_each_capped_by_its_link():
    # S -> L, S -> R (<= 50 rows), L -> J, R -> J (<= 30 rows); stages given out of order.
    topology = Topology(
        ("J", "R", "L", "S"),
        (StageLink("S", "L"), StageLink("S", "R", 50.0), StageLink("L", "J"), StageLink("R", "J", 30.0)),
    )
    stages = [
        windows("S", [(100, 100)]),  # sel 1: D_out_S = 100
        windows("L", [(80, 40)], queued_out=4),  # sel 0.5: D_out_L = 0.5 * 80 + 4 = 44
        windows("R", [(40, 60)]),  # sel 1.5: D_out_R = 1.5 * 40 = 60
        windows("J", [(70, 70)]),
    ]
    prediction = predict_next_inputs(topology, stages, OPTIONS)
    assert [p.stage for p in prediction.stages][0] == "S" and prediction.stages[-1].stage == "J"
    # L: min(100, inf) = 100; R: min(100, 50) = 50; J: min(44, inf) + min(60, 30) = 44 + 30 = 74.
    assert prediction.of("L").next_input_rows == pytest.approx(100.0)
    assert prediction.of("R").next_input_rows == pytest.approx(50.0)
    assert prediction.of("J").next_input_rows == pytest.approx(74.0)


def test_pre_scale_asks_for_the_channels_the_predicted_input_needs():
    topology = Topology.chain("A", "B")
    prediction = predict_next_inputs(topology, [windows("A", [(74, 74)]), windows("B", [(10, 10)])], OPTIONS).of("B")
    # 74 rows at 20 rows/channel and 70% utilization: 74 / 14 = 5.29 -> 6 channels.
    assert channels_needed(74.0, 20.0, OPTIONS) == 6
    decision = pre_scale(prediction, 4, 20.0, OPTIONS, time_s=12.0)
    assert (decision.action, decision.from_channels, decision.to_channels) == ("scale_out", 4, 6)
    assert decision.rule == "as-stream-predict" and decision.is_rescale and decision.time_s == 12.0
    assert "74 rows predicted" in decision.reason and decision.signals["channels_needed"] == 6.0
    # Enough channels already, or more than needed: no decision (pre-scaling never shrinks).
    assert pre_scale(prediction, 6, 20.0, OPTIONS, time_s=12.0).action == "none"
    assert pre_scale(prediction, 16, 20.0, OPTIONS, time_s=12.0).action == "none"
    # Clamped to the options' bounds.
    assert channels_needed(1e9, 1.0, OPTIONS.model_copy(update={"max_channels": 32})) == 32
    assert channels_needed(0.0, 20.0, OPTIONS.model_copy(update={"min_channels": 2})) == 2


# ------------------------------------------------------------------ properties
finite_latency = st.floats(0.0, 1e3, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    points=st.lists(st.tuples(st.floats(0.0, 1e4), finite_latency), min_size=2, max_size=60),
    offset=st.sampled_from([0.0, 1.7e9]),
)
def test_the_fit_leaves_residuals_summing_to_zero_and_beats_other_lines(points, offset):
    times = np.array(sorted(t for t, _ in points)) + offset
    latencies = np.array([g for _, g in points])
    line = fit_latency_line(times, latencies)
    assert line is not None
    residuals = latencies - line.at(times)
    scale = max(1.0, float(np.abs(latencies).max()))
    assert abs(float(residuals.sum())) <= 1e-6 * scale * len(points)
    # Eq. 6 at the optimum is no larger than at the horizontal line through the mean or a nudged slope.
    assert line.mean_squared_error <= float(np.mean((latencies - latencies.mean()) ** 2)) + 1e-9 * scale**2
    nudged = (line.slope + 1e-3) * (times - times.mean()) + latencies.mean()
    assert line.mean_squared_error <= float(np.mean((latencies - nudged) ** 2)) + 1e-9 * scale**2


@settings(max_examples=200, deadline=None)
@given(
    rows_in=st.floats(0.0, 1e6),
    more=st.floats(0.0, 1e6),
    selectivity=st.floats(0.0, 5.0),
    queued=st.floats(0.0, 1e4),
    bandwidth=st.one_of(st.just(math.inf), st.floats(0.0, 1e6)),
)
def test_prediction_is_monotone_in_upstream_input(rows_in, more, selectivity, queued, bandwidth):
    topology = Topology(("up", "side", "down"), (StageLink("up", "down", bandwidth), StageLink("side", "down")))

    def predicted_down(up_rows: float) -> float:
        # Both windows have selectivity `selectivity`, so only D_in_up(w) changes between the calls.
        up = windows("up", [(1.0, selectivity), (up_rows, selectivity * up_rows)], queued_out=queued)
        return predict_next_inputs(topology, [up, windows("side", [(10, 10)])], OPTIONS).of("down").next_input_rows

    smaller, larger = predicted_down(rows_in), predicted_down(rows_in + more)
    assert larger >= smaller * (1 - 1e-12)
    # Never more than the link lets through, plus the side stage's 1 * 10 rows.
    assert smaller <= bandwidth + 10.0 + 1e-9


@settings(max_examples=100, deadline=None)
@given(st.permutations(["a", "b", "c"]))
def test_levels_do_not_depend_on_the_order_stages_are_given_in(order):
    scales = {"a": 1.0, "b": 3.0, "c": 2.0}
    report = identify_bottlenecks([crafted(s, scales[s]) for s in order], OPTIONS)
    assert report.ranking == ("b", "c", "a")
