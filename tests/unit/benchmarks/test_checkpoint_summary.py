"""`esp bench checkpoint`'s figures from measured series: each kill's recovery is the first batch
after it, per channel; the latency cost leaves out the seconds a kill disturbed; the PNG renders."""

from __future__ import annotations

import json

from benchmarks.checkpoint import Kill, PolicyResult, PolicyRun, _attach_recoveries, run_summary_document
from benchmarks.checkpoint_command import checkpoint_table, plot_checkpoint
from pipelines.streams.metrics import BatchMetrics, ChannelMetrics, RebuildReport

STARTED = 1_000.0


def _batch(batch_id: int, at_s: float, proc_ms: float, predicted: float, rebuild: RebuildReport | None = None):
    channels = [
        ChannelMetrics(c, proc_ms=proc_ms + c, open_ms=proc_ms / 2, rebuild=rebuild, predicted_recovery_s=predicted)
        for c in (0, 1)
    ]
    return BatchMetrics("s", batch_id, 1, 2, wall_time=STARTED + at_s, per_channel=channels)


def test_a_kill_is_measured_by_the_first_batch_after_it_and_compared_with_the_prediction() -> None:
    rebuild = RebuildReport(100, 4000, 300.0, 5000, 900.0)
    metrics = [_batch(1, 10, 50, 0.4), _batch(2, 11, 60, 1.3)]
    metrics += [_batch(3, 40, 1500, 0.2, rebuild), _batch(4, 41, 70, 0.3)]
    kill = Kill(at_s=12.0, back_at_s=40.0)

    _attach_recoveries([kill], metrics, STARTED)

    assert kill.batch_id == 3
    assert kill.channel_recovery_s == {0: 1.5, 1: 1.501}
    assert kill.recovery_s == 1.501 and kill.predicted_s == 1.3
    assert kill.channel_restore_s == {0: 0.3, 1: 0.3} and kill.channel_fold_s == {0: 0.9, 1: 0.9}


def _result(kills: list[Kill]) -> PolicyResult:
    p99 = [100.0] * 60
    p99[30:40] = [9_000.0] * 10  # a kill's restart and catch-up
    p99[22] = 0.0  # no probe came back in that second: not a latency of 0
    return PolicyResult(
        run=PolicyRun("fixed 14 s", "fixed", 14.0),
        kills=kills,
        batches=[],
        snapshots=[{"at_s": 5.0, "channel": 0}, {"at_s": 25.0, "channel": 0}],
        peak_window_s=(20.0, 50.0),
        p99_per_second_ms=p99,
        sent_per_second=[10] * 60,
        correctness={"ok": True},
    )


def test_the_latency_cost_leaves_out_the_seconds_from_a_kill_to_the_catch_up() -> None:
    kill = Kill(at_s=30.0, back_at_s=35.0, caught_up_at_s=39.0, channel_recovery_s={0: 1.2, 1: 0.4})
    summary = _result([kill]).summary(bound_s=1.0)
    assert summary["peak_p99_ms"] == 100.0
    assert summary["max_recovery_s_measured"] == 1.2 and summary["over_bound"] == 1
    assert summary["snapshots"] == 2 and summary["snapshots_in_peak"] == 1
    # Without the catch-up time the disturbed seconds count, and the cost is the restart's.
    unfinished = Kill(at_s=30.0, back_at_s=35.0, caught_up_at_s=32.0)
    assert _result([unfinished]).summary(bound_s=1.0)["peak_p99_ms"] > 1_000


def test_the_document_renders_as_a_table_and_a_png(tmp_path) -> None:
    kill = Kill(at_s=30.0, back_at_s=35.0, caught_up_at_s=39.0, channel_recovery_s={0: 1.2})
    results = run_summary_document([_result([kill])], options={"max_recovery_s": 1.0})
    json.dumps(results, default=str)
    checkpoint_table(results)
    plot_checkpoint(results, tmp_path / "checkpoint.png")
    assert (tmp_path / "checkpoint.png").stat().st_size > 10_000


def test_several_rounds_report_medians_with_their_spread_and_every_recovery() -> None:
    from benchmarks.checkpoint import rounds_document

    def round_with(recovery_s: float, p99: float) -> list[PolicyResult]:
        result = _result([Kill(at_s=30.0, back_at_s=35.0, caught_up_at_s=39.0, channel_recovery_s={0: recovery_s})])
        result.p99_per_second_ms = [p99] * 60
        return [result]

    document = rounds_document(
        [round_with(0.9, 100.0), round_with(1.5, 300.0), round_with(1.1, 200.0)], {"max_recovery_s": 1.0}
    )
    summary = document["policies"]["fixed 14 s"]
    assert summary["max_recovery_s_measured"] == 1.1 and summary["peak_p99_ms"] == 200.0
    assert summary["spread"]["max_recovery_s_measured"] == {
        "median": 1.1,
        "min": 0.9,
        "max": 1.5,
        "n": 3,
        "runs": [0.9, 1.5, 1.1],
    }
    assert [r["round"] for r in summary["recoveries"]] == [1, 2, 3]
    assert summary["over_bound_total"] == 2 and summary["rounds"] == 3 and document["correct"]
    assert "rounds 3" not in checkpoint_table(document).title and "medians of 3" in checkpoint_table(document).title


def test_kill_times_are_drawn_around_the_regular_ones_the_same_for_every_policy_of_a_round():
    from benchmarks.checkpoint import CheckpointBenchOptions

    options = CheckpointBenchOptions(duration_s=190.0, first_kill_s=55.0, kill_every_s=45.0, kill_jitter_s=10.0)
    first, again, second = options.kill_times(0), options.kill_times(0), options.kill_times(1)
    assert first == again and first != second
    assert len(first) == 3  # due near 55, 100 and 145 s; 190 is within 10 s of the end
    for drawn, regular in zip(first, (55.0, 100.0, 145.0)):
        assert abs(drawn - regular) <= 10.0
    regular = CheckpointBenchOptions(kill_jitter_s=0.0).kill_times(3)
    assert regular == [55.0, 100.0, 145.0]
