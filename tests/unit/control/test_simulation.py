"""The same loop on the queueing model: step up, fall, skew, traces, figures, CLI."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.control_figures import run_elasticity_benchmark
from elasticity.control.options import ControllerOptions, ControlOptions
from elasticity.control.simulation import StageModel, StageModelOptions, simulate_elastic, simulate_static
from elasticity.control.traces import Trace, esault_trace, sine_trace, square_trace, step_trace, trace_by_name

MODEL = StageModelOptions(service_rate_rps=1000.0)
CONTROL = ControlOptions(controller=ControllerOptions(max_channels=64))


def test_scales_out_under_a_step_up_and_back_in_after_the_fall():
    trace = Trace.from_segments("up-down", [(20, 3000.0), (60, 20000.0), (60, 3000.0)])
    run = simulate_elastic(trace, MODEL, CONTROL, initial_channels=6)
    at = lambda t: int(run.channels[int(t)])  # noqa: E731
    assert at(70) >= 24  # 20000 rec/s need more than 20 channels of 1000 rec/s
    assert at(135) <= 8
    actions = [d.action for d in run.decisions]
    assert "scale_out" in actions and "scale_in" in actions
    assert run.slo_attainment(1.0) >= 0.85


def test_targeted_split_relieves_a_hot_channel():
    # Channel 0 carries 4x a normal share: 12000 * 4/11 = 4364 rec/s on a 2000 rec/s channel.
    trace = Trace.from_segments("flat", [(60, 12000.0)])
    model = StageModelOptions(service_rate_rps=2000.0, hot_factor=4.0)
    run = simulate_elastic(trace, model, CONTROL, initial_channels=8, layout="skewed")
    assert run.decisions and run.decisions[0].action == "split" and run.decisions[0].channel == 0
    assert run.p99_latency_s[-10:].max() < 1.0


def test_targeted_split_in_micro_batches_where_every_channel_is_late():
    # As on Spark: a batch ends with its slowest task, so all 8 channels' probes are late
    # together; only the work each channel did points at channel 0.
    trace = Trace.from_segments("flat", [(60, 12000.0)])
    model = StageModelOptions(service_rate_rps=2000.0, hot_factor=4.0, micro_batches=True)
    run = simulate_elastic(trace, model, CONTROL, initial_channels=8, layout="skewed")
    assert run.decisions and run.decisions[0].action == "split" and run.decisions[0].channel == 0
    assert "busy" in run.decisions[0].reason


def test_model_split_merge_and_rescale_keep_shares_and_backlog():
    model = StageModel(StageModelOptions(hot_factor=3.0), 4, "skewed")
    model.queues = np.array([40.0, 10.0, 10.0, 10.0])
    model.split(0)
    assert model.channels == 5 and model.shares[0] == pytest.approx(model.shares[4])
    model.merge(2)
    assert model.channels == 4
    model.rescale_even(8)
    np.testing.assert_allclose(model.shares, 1 / 8)
    assert model.queues.sum() == pytest.approx(70.0) and model.layout_epoch == 3
    assert model.pending_pause_s == pytest.approx(3 * model.options.rescale_pause_s)


def test_static_run_at_1000_channels_and_1e6_rps_is_fast():
    run = simulate_static(esault_trace(1e6), StageModelOptions(service_rate_rps=2000.0), 1000)
    assert run.times_s.size == 480 and run.slo_attainment(1.0) == 1.0


def test_traces():
    trace = esault_trace(150_000.0)
    assert trace.peak_rps == 150_000.0 and trace.duration_s == 480.0
    assert len(trace.change_points_s) == 12
    # rise every 10 s, hold, fall every 20 s
    assert list(np.diff(trace.starts_s[:4])) == [20.0, 10.0, 10.0]
    assert trace.rate_at(45.0) == 150_000.0 and trace.rate_at(125.0) == 100_000.0
    assert square_trace(1.0, 2.0, period_s=10.0, cycles=2).rate_at(np.array([0.0, 6.0]))[1] == 2.0
    sine = sine_trace(10.0, 5.0, period_s=100.0, cycles=1)
    assert sine.rate_at(25.0) == pytest.approx(15.0)
    assert step_trace(1.0, 3.0, 5.0, 10.0).change_points_s == [5.0]
    with pytest.raises(ValueError):
        trace_by_name("nope", 1.0)


def test_the_longest_peak_hold_is_what_a_static_count_must_survive():
    # eSault holds its peak 80 s per cycle; a square load its high half; a sine peaks for one sample.
    assert esault_trace(800.0).longest_peak_hold_s == 80.0
    assert square_trace(160.0, 800.0, period_s=120.0, cycles=3).longest_peak_hold_s == 60.0
    assert sine_trace(10.0, 5.0, period_s=100.0, cycles=1).longest_peak_hold_s == 1.0
    # Two peaks: the longer one counts.
    assert Trace.from_segments("t", [(5.0, 2.0), (1.0, 1.0), (9.0, 2.0)]).longest_peak_hold_s == 9.0


def test_benchmark_figures_on_the_esault_trace():
    figures, run, static = run_elasticity_benchmark(esault_trace(40_000.0), MODEL, CONTROL, 3, slo_s=1.0)
    summary = figures["summary"]
    assert summary["load_changes"] == 12
    assert summary["max_decisions_to_settle"] <= 3
    assert summary["oscillations_in_steady_phases"] == 0
    assert summary["slo_attainment"] >= 0.9
    assert static.meets_target and 40 <= static.channels <= 64
    assert 0 < summary["channel_seconds_ratio"] < 1
    json.dumps(figures)


def test_cli_writes_json_and_png(tmp_path: Path):
    import typer
    from typer.testing import CliRunner

    from benchmarks.simulate_command import simulate_command

    app = typer.Typer()
    app.command()(simulate_command)
    out_json, out_png = tmp_path / "sim.json", tmp_path / "sim.png"
    result = CliRunner().invoke(
        app, ["--channels-max", "64", "--rate", "50000", "--json", str(out_json), "--png", str(out_png)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(out_json.read_text())["summary"]["load_changes"] == 12
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "SLO attainment" in result.output


def test_control_package_imports_neither_spark_nor_dagster_nor_upper_layers():
    forbidden = ("pyspark", "dagster", "pipelines", "orchestration")
    package = Path(__file__).resolve().parents[3] / "elasticity" / "control"
    for source in package.glob("*.py"):
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{source.name} imports {name}"


def _reversals_within_phases(run) -> int:
    """Direction changes among the decisions taken within each constant-rate phase of the trace."""
    reversals = 0
    for start, end, _rate in run.trace.phases():
        signs = [
            1 if d.to_channels > d.from_channels else -1 for d in run.decisions if start <= d.time_s - run.tick_s < end
        ]
        reversals += sum(1 for a, b in zip(signs, signs[1:], strict=False) if a != b)
    return reversals


def test_a_costly_rescale_pause_is_not_read_as_a_scale_out_that_lost_throughput():
    # Each rescale stops processing 5 s: the pause's empty periods must not make P5 scale back in.
    trace = Trace.from_segments("up", [(20, 3000.0), (100, 20000.0)])
    model = StageModelOptions(service_rate_rps=1000.0, rescale_pause_s=5.0)
    run = simulate_elastic(trace, model, CONTROL, initial_channels=6)
    assert [d.action for d in run.decisions] == ["scale_out"]
    assert run.channels[-1] >= 20000.0 / 1000.0
    assert run.p99_latency_s[-30:].max() < 1.0


@pytest.mark.parametrize("warmup_s", [0.0, 5.0])
def test_costly_pauses_and_cold_channels_cause_no_oscillation_on_a_square_load(warmup_s):
    trace = square_trace(4000.0, 20000.0, period_s=120.0, cycles=3)
    model = StageModelOptions(service_rate_rps=1000.0, rescale_pause_s=5.0, channel_warmup_s=warmup_s)
    run = simulate_elastic(trace, model, CONTROL, initial_channels=6)
    assert "P5" not in {d.rule for d in run.decisions}
    assert _reversals_within_phases(run) == 0
    high = trace.rate_at(run.times_s) == 20000.0
    # 15 s into each high phase (60..120 s of each period) the stage carries it.
    assert run.channels[high & (run.times_s % 120 >= 75)].min() >= 20


def test_channels_added_by_a_rescale_start_cold_and_warm_up():
    model = StageModel(StageModelOptions(service_rate_rps=1000.0, channel_warmup_s=4.0, rescale_pause_s=0.0), 2)
    model.rescale_even(4)
    np.testing.assert_allclose(model.warmth(), [1.0, 1.0, 0.5, 0.5])
    snapshot = model.advance(8000.0, 1.0)  # 2000 rec/s arrive per channel: all four are saturated
    np.testing.assert_allclose(snapshot.throughput_rps, [1000.0, 1000.0, 500.0, 500.0], rtol=0.05)
    for t in range(2, 6):
        model.advance(8000.0, float(t))
    np.testing.assert_allclose(model.warmth(), 1.0)
    model.split(0)
    assert model.warmth()[-1] == 0.5 and model.warmth()[0] == 1.0
    model.rescale_even(3)  # the channels that stay keep their warmth
    np.testing.assert_allclose(model.warmth(), 1.0)
