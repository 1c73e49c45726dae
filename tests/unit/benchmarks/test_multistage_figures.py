"""`esp bench multistage`'s figures from hand-made series: rises of the load, the downstream
stage's scale-out after each, whether it came before the job was congested, SLO attainment and
channel-seconds."""

from __future__ import annotations

import numpy as np

from benchmarks.multistage_figures import StageRescaleAt, TickAt, first_after, policy_figures, rises
from benchmarks.multistage_sim import per_second

SQUARE = [100.0] * 10 + [400.0] * 10 + [100.0] * 10 + [400.0] * 10


def test_rises_are_the_upward_changes_with_the_next_change_as_their_end() -> None:
    assert rises(SQUARE) == [(10.0, 20.0), (30.0, 40.0)]
    assert rises([5.0] * 4) == []


def test_first_after_only_counts_times_inside_the_window() -> None:
    assert first_after([3.0, 12.0, 15.0], 10.0, 20.0) == 2.0
    assert first_after([3.0, 25.0], 10.0, 20.0) is None


def test_figures_of_a_policy_that_scaled_the_downstream_stage_ahead_of_congestion() -> None:
    channels = {"main": np.ones(40), "buckets": np.array([1.0] * 12 + [3.0] * 28)}
    p99 = np.array([2.0] * 35 + [9.0] * 5)
    rescales = [
        StageRescaleAt(12.0, "buckets", 1, 3, "as-stream-predict"),
        StageRescaleAt(14.0, "main", 1, 2, "as-stream-plan"),  # not the downstream stage: not a lead
        StageRescaleAt(36.0, "buckets", 3, 4, "as-stream-plan"),
    ]
    ticks = [TickAt(15.0, True), TickAt(33.0, True)]
    figures = policy_figures(SQUARE, channels, p99, 8.0, rescales, ticks, "buckets")
    assert figures["slo_attainment"] == 35 / 40
    assert figures["channel_seconds"] == 40 + 12 + 3 * 28
    assert figures["channel_seconds_by_stage"] == {"main": 40.0, "buckets": 96.0}
    assert figures["decisions"] == 3
    assert figures["prescale_lead_s"] == [2.0, 6.0]
    first, second = figures["steps"]
    assert first["congested_after_s"] == 5.0 and first["before_congestion"] is True
    assert second["congested_after_s"] == 3.0 and second["before_congestion"] is False


def test_a_rise_the_downstream_stage_never_answered_has_no_lead() -> None:
    figures = policy_figures(SQUARE, {"buckets": np.ones(40)}, np.zeros(40), 8.0, [], [], "buckets")
    assert figures["prescale_lead_s"] == [None, None]
    assert not any(step["before_congestion"] for step in figures["steps"])


def test_the_figures_are_plain_json_values_even_from_numpy_times() -> None:
    import json

    ticks = [TickAt(np.float64(12.0), True)]
    rescales = [StageRescaleAt(np.float64(11.0), "buckets", 1, 2, "reactive")]
    figures = policy_figures(SQUARE, {"buckets": np.ones(40)}, np.zeros(40), 8.0, rescales, ticks, "buckets")
    assert json.loads(json.dumps(figures))["steps"][0]["before_congestion"] is True


def test_a_per_tick_series_becomes_one_value_per_second_at_any_tick_length() -> None:
    # 2.5 s ticks (the default): repeating each tick int(2.5) = 2 times made 96 ticks 192 s of a
    # 240 s run, so the model's figures lost a fifth of the run and the plot failed.
    assert per_second(np.array([1.0, 2.0]), 2.5, 5).tolist() == [1.0, 1.0, 1.0, 2.0, 2.0]
    assert per_second(np.arange(96.0), 2.5, 240).size == 240
    assert per_second(np.array([1.0, 2.0]), 5.0, 12).tolist() == [1.0] * 5 + [2.0] * 7
