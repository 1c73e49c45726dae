"""The real-stack benchmark's measured series: per-second channels and p99 probe latency from metrics."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from benchmarks.elasticity_command import (
    BenchOptions,
    _load_kwargs,
    _static_candidates,
    _with_repetitions,
    per_second_series,
    static_segment_seconds,
)
from pipelines.load import LoadSpec
from pipelines.load.profiles import rate_profile
from pipelines.streams.metrics import BatchMetrics, ChannelMetrics


def _batch(
    end: float, channels: int, latencies_ms: list[float], epoch: int = 0, batch_ms: float = 900.0
) -> BatchMetrics:
    per_channel = [ChannelMetrics(channel=c, probe_latency_ms=list(latencies_ms)) for c in range(channels)]
    return BatchMetrics(
        stream="s",
        batch_id=int(end),
        epoch=epoch,
        channels=channels,
        wall_time=end,
        batch_ms=batch_ms,
        per_channel=per_channel,
    )


def test_a_long_batch_shows_as_rising_latency_while_it_runs_not_only_at_its_end():
    start = 1000.0
    # Quick batches until t=3, then, rescaled to 3 channels, one batch from t=3.2 to t=10 whose
    # probes were sent at t=3.5 and later.
    metrics = [
        _batch(start + 1, 2, [500]),
        _batch(start + 2, 2, [500]),
        _batch(start + 3, 2, [500]),
        _batch(start + 10, 3, [6500, 5500], epoch=1, batch_ms=6800),
    ]
    channels, p99 = per_second_series(metrics, start, 11, initial_channels=2)
    # The new layout counts from the start of its first batch, not from when that batch reported.
    assert channels[:3].tolist() == [2] * 3 and channels[3:].tolist() == [3] * 8
    assert p99[1] == 0.5
    # During the long batch the oldest outstanding probe (sent at 3.5) ages second by second.
    np.testing.assert_allclose(p99[4:10], [1.5, 2.5, 3.5, 4.5, 5.5, 6.5], atol=0.05)
    assert p99[10] >= 6.0


def test_static_candidates_start_at_the_count_saturated_by_the_peak():
    options = BenchOptions("esault", 800, 1.25, 1, 4.0, 8.0, 5.0, 8, 1, 45, 0.9, 3000)
    assert _static_candidates(options) == [4, 5, 6, 7, 8]


def test_a_static_segment_holds_the_peak_as_long_as_the_played_trace_does():
    def segment_s(trace: str, static_seconds: float) -> float:
        options = BenchOptions(trace, 800, 1.25, 1, 4.0, 15.0, 5.0, 8, 1, static_seconds, 0.9, 3000)
        spec = SimpleNamespace(input_topic="t")
        return static_segment_seconds(options, rate_profile(LoadSpec(**_load_kwargs(spec, options))).trace)

    # eSault holds its peak 80 s, played 1.25x faster: 64 s, longer than the 45-s floor.
    assert segment_s("esault", 45.0) == 64.0
    assert segment_s("square", 45.0) == 48.0
    # A sine peaks for a moment: the floor holds.
    assert segment_s("sine", 45.0) == 45.0
    assert segment_s("esault", 90.0) == 90.0


def _summary(ratio: float, slo: float) -> dict:
    return {
        "slo_attainment": slo,
        "channel_seconds_ratio": ratio,
        "oscillations_in_steady_phases": 0,
        "max_decisions_to_settle": 2,
        "rescale_decisions": 4,
        "max_p99_latency_s": 3.0,
    }


def test_repetitions_report_medians_spread_and_the_median_run():
    runs = [
        ({"summary": _summary(r, s), "decisions": [{"rule": f"P{i}"}], "ticks": [{"time_s": float(i)}]}, f"run{i}")
        for i, (r, s) in enumerate([(1.3, 0.9), (0.9, 1.0), (1.1, 0.97)])
    ]
    figures, run = _with_repetitions(runs)
    assert run == "run2" and figures["summary"]["channel_seconds_ratio"] == 1.1  # the median run, a real one
    ratio = figures["repetitions"]["channel_seconds_ratio"]
    assert (ratio["median"], ratio["min"], ratio["max"]) == (1.1, 0.9, 1.3)
    assert figures["repetitions"]["slo_attainment"]["runs"] == [0.9, 1.0, 0.97]
    assert len(figures["run_summaries"]) == 3
    assert [d[0]["rule"] for d in figures["run_decisions"]] == ["P0", "P1", "P2"]  # every run's, in order
    assert [t[0]["time_s"] for t in figures["run_ticks"]] == [0.0, 1.0, 2.0]
