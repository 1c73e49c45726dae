"""The batch-overhead evidence read from a saved elasticity run (`benchmarks.batch_overhead`)."""

from __future__ import annotations

import pytest

from benchmarks.batch_overhead import allowed_overhead_s, overhead_rows, readings


def tick(time_s: float, rule: str, **signals: float) -> dict:
    return {"time_s": time_s, "rule": rule, "signals": signals}


def test_a_static_segment_at_the_slo_bounds_the_overhead_of_a_cycle():
    # 4 channels at 800 rec/s, 250 rec/s of busy time each: busy 0.8 of a cycle; a p99 of 12 s allows
    # cycles of 6 s, 1.2 s of them outside the channels.
    assert allowed_overhead_s(12.0, 800.0, 4, 250.0) == pytest.approx(1.2)


def test_a_periods_channels_follow_the_decision_once_its_rescale_settles():
    ticks = [
        tick(10.0, "P1", throughput_rps=150.0, busy_share_mean=0.6, batch_cycle_s=5.0),
        tick(15.0, "settling"),
        tick(20.0, "warmup", throughput_rps=300.0, busy_share_mean=0.5, batch_cycle_s=4.0),
    ]
    found = readings(ticks, [{"time_s": 10.0, "to_channels": 2}], first_channels=1)
    assert [(reading.channels, reading.non_busy_s) for reading in found] == [(1, 2.0), (2, 2.0)]
    assert [reading.busy_rate_rps for reading in found] == [250.0, 300.0]


def test_only_static_segments_that_met_the_slo_make_rows():
    run = {
        "options": {"initial_channels": 1},
        "peak_rate_rps": 800.0,
        "run_ticks": [[tick(10.0, "P1", throughput_rps=200.0, busy_share_mean=0.8, batch_cycle_s=5.0)]],
        "run_decisions": [[]],
        "static_segments": [
            {"channels": 4, "slo_attainment": 0.5, "max_p99_s": 20.0},
            {"channels": 5, "slo_attainment": 1.0, "max_p99_s": 10.0},
        ],
    }
    (row,) = overhead_rows("run", run)
    assert (row.static_channels, row.allowed_overhead_s, row.least_s) == (5, pytest.approx(1.8), pytest.approx(1.0))
