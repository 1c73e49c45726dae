"""Hand-written fakes and factories for tests of the control loop (and of its integrations).

`make_evaluation` scripts what the detectors concluded (to test controller rules in isolation),
`make_snapshot` scripts what a collector saw, and `ScriptedCollector` replays snapshots to the
loop, like flink-autoscaler's test fakes: no mocks, just small real implementations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from elasticity.control.signals import CongestionSignal, Evaluation, MetricsSnapshot


def make_evaluation(
    channels: int = 8,
    *,
    time_s: float = 100.0,
    congested: bool = False,
    overloaded: Iterable[int] = (),
    underloaded: Iterable[int] = (),
    throughput_rps: float = 8000.0,
    input_rate_rps: float | None = None,
    ready_up: bool = True,
    ready_down: bool = True,
    draining: bool = False,
    layout_epoch: int = 0,
    saturated: bool = False,
    settling: bool = False,
    after_rescale: bool = False,
    outpaced: bool = False,
    outrun: bool = False,
    lag_records: float | None = None,
    rescale_pause_s: float = 0.0,
    busy_share: Sequence[float] | None = None,
    top_key_share: Sequence[float] | None = None,
    busy_rate_rps: float | None = None,
    batch_overhead_share: float | None = None,
    batch_cycle_s: float | None = None,
    channel_throughput_rps: Sequence[float] | None = None,
    periods_judged: int = 0,
) -> Evaluation:
    """An evaluation as the detectors would produce it; per-channel arrays follow the given sets."""
    over = np.zeros(channels, dtype=bool)
    over[list(overloaded)] = True
    under = np.zeros(channels, dtype=bool)
    under[list(underloaded)] = True
    per_channel = np.full(channels, throughput_rps / channels)
    per_channel[under] *= 0.3
    rate = throughput_rps if input_rate_rps is None else input_rate_rps
    return Evaluation(
        time_s=time_s,
        channels=channels,
        layout_epoch=layout_epoch,
        ready_up=ready_up,
        ready_down=ready_down,
        overloaded=over,
        underloaded=under,
        late_share=over.astype(float),
        light_share=under.astype(float),
        latest_latency_s=np.where(over, 3.0, 0.05),
        latest_throughput_rps=per_channel,
        total_throughput_rps=throughput_rps,
        input_rate_rps=rate,
        recent_max_input_rate_rps=rate,
        total_lag_records=rate * (2.0 if congested else 0.0) if lag_records is None else lag_records,
        congestion=CongestionSignal(
            index=1.0 if congested else 0.0,
            congested=congested,
            lag_s=2.0 if congested else 0.0,
            growth_share=1.0 if congested else 0.0,
            draining=draining,
        ),
        timeout_in_window=False,
        saturated=saturated,
        busy_rate_rps=busy_rate_rps,
        batch_overhead_share=batch_overhead_share,
        settling=settling,
        after_rescale=after_rescale,
        outpaced=outpaced,
        outrun=outrun,
        rescale_pause_s=rescale_pause_s,
        busy_share=None if busy_share is None else np.asarray(busy_share, dtype=float),
        channel_throughput_rps=per_channel
        if channel_throughput_rps is None
        else np.asarray(channel_throughput_rps, dtype=float),
        top_key_share=None if top_key_share is None else np.asarray(top_key_share, dtype=float),
        batch_cycle_s=batch_cycle_s,
        periods_judged=periods_judged,
    )


def make_snapshot(
    time_s: float,
    latencies: Iterable[float],
    throughputs: Iterable[float] | None = None,
    *,
    input_rate_rps: float = 1000.0,
    lag: float = 0.0,
    timed_out: Iterable[bool] | None = None,
    layout_epoch: int = 0,
    busy_share: Iterable[float] | None = None,
    batch_cycle_s: float | None = None,
) -> MetricsSnapshot:
    latency_list = list(latencies)
    return MetricsSnapshot.build(
        time_s=time_s,
        probe_latency_s=latency_list,
        throughput_rps=list(throughputs) if throughputs is not None else [100.0] * len(latency_list),
        input_rate_rps=input_rate_rps,
        lag_records=[lag / 2, lag / 2],
        probe_timed_out=list(timed_out) if timed_out is not None else None,
        layout_epoch=layout_epoch,
        busy_share=list(busy_share) if busy_share is not None else None,
        batch_cycle_s=batch_cycle_s,
    )


class ScriptedCollector:
    """A `MetricsCollector` that replays a list of snapshots, one per collect(), then repeats the last."""

    def __init__(self, snapshots: Sequence[MetricsSnapshot]) -> None:
        if not snapshots:
            raise ValueError("script at least one snapshot")
        self.snapshots = list(snapshots)
        self.collected = 0

    def collect(self, now_s: float) -> MetricsSnapshot:
        snapshot = self.snapshots[min(self.collected, len(self.snapshots) - 1)]
        self.collected += 1
        return snapshot
