"""A discrete-time fluid queueing model of a keyed stage, driven by the real control loop.

Each channel has a service rate (records/s) and a queue; arrivals split among channels by the
layout's shares (uniform, or skewed with one hot channel). Per tick (one probe period) the model
is solved exactly for constant rates: an optional rescale pause first (arrivals pile up, nothing
is processed), then each channel serves min(queue + arrivals, capacity). It then produces the
very `MetricsSnapshot` the real collector would: probe latency = base + queue / service rate,
per-channel throughput, input rate, and lag (unprocessed records, spread evenly over the Kafka
partitions because keys hash to partitions independently of channels). `SimulatedRealizer`
applies decisions to the model as the real resizer would to the layout: scale out/in
rebalances evenly (consistent hashing), split halves one channel's share into a new channel,
merge hands a channel's share to its ring neighbours; every rescale costs a pause and bumps the
layout epoch. The unread backlog follows the new layout, as unread Kafka records do. Channels a
rescale adds start cold (`channel_warmup_s`): their service rate ramps from
`cold_capacity_fraction` to the full rate over their first seconds of processing, as a real
channel's first batches pay for its store and workers.
Everything is numpy over channels, so 1000 channels x 500 ticks take well under a second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from elasticity.control.clock import ManualClock
from elasticity.control.decision import Decision
from elasticity.control.loop import ElasticLoop
from elasticity.control.options import ControlOptions
from elasticity.control.signals import FloatArray, MetricsSnapshot
from elasticity.control.traces import Trace

LayoutKind = Literal["uniform", "skewed"]
ProgressCallback = Callable[[int, int], None]


class StageModelOptions(BaseModel):
    """Parameters of the queueing model (not of the controller)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    service_rate_rps: float = Field(2000.0, gt=0, description="Records/s one channel processes when busy.")
    base_latency_s: float = Field(0.05, ge=0, description="Probe latency of an empty channel (routing, sink, network).")
    tick_s: float = Field(1.0, gt=0, description="Simulated time per tick; equals the probe period.")
    rescale_pause_s: float = Field(0.5, ge=0, description="Processing stops this long after each rescale decision.")
    kafka_partitions: int = Field(8, ge=1, description="Input topic partitions the lag is reported for.")
    arrival_noise: float = Field(
        0.02, ge=0, lt=1, description="Relative standard deviation of each channel's arrivals per tick (Gaussian)."
    )
    sink_capacity_rps: float | None = Field(
        None, gt=0, description="A downstream limit on total throughput (models Gedik's remote congestion); None: none."
    )
    probe_timeout_s: float = Field(5.0, gt=0, description="Probe latencies above this are reported as timeouts.")
    hot_factor: float = Field(4.0, ge=1, description="Skewed layout: the hot channel's share over a normal channel's.")
    seed: int = Field(0, description="Seed of the arrival noise (runs are reproducible).")
    channel_warmup_s: float = Field(
        0.0,
        ge=0,
        description="Seconds of processing a channel added by a rescale needs to reach the full service rate "
        "(0: channels are warm at once).",
    )
    cold_capacity_fraction: float = Field(
        0.5, gt=0, le=1, description="Share of the service rate a cold channel starts at; it ramps linearly to 1."
    )
    micro_batches: bool = Field(
        False,
        description="Channels run in lock-step micro-batches: a batch ends when its slowest task does, so every "
        "channel's probe waits for the most loaded channel's queue (as on Spark).",
    )


def layout_shares(channels: int, kind: LayoutKind, hot_factor: float) -> FloatArray:
    """Shares of the input per channel: even, or channel 0 hot_factor times as loaded as the rest."""
    weights = np.ones(channels)
    if kind == "skewed" and channels > 1:
        weights[0] = hot_factor
    return weights / weights.sum()


class StageModel:
    """The mutable queueing state of the simulated stage."""

    def __init__(self, options: StageModelOptions, channels: int, layout: LayoutKind = "uniform") -> None:
        self.options = options
        self.shares = layout_shares(channels, layout, options.hot_factor)
        self.queues = np.zeros(channels)
        self.warm_s = np.full(channels, np.inf)  # seconds each channel has processed (the initial ones are warm)
        self.layout_epoch = 0
        self.pending_pause_s = 0.0
        self._rng = np.random.default_rng(options.seed)
        self.last_snapshot: MetricsSnapshot | None = None

    @property
    def channels(self) -> int:
        return int(self.shares.size)

    # ---------------------------------------------------------------- dynamics
    def advance(self, rate_rps: float, end_time_s: float) -> MetricsSnapshot:
        """Simulate one tick at a constant input rate; return the snapshot at its end."""
        opts = self.options
        tick = opts.tick_s
        noise = 1.0 + opts.arrival_noise * self._rng.standard_normal(self.channels)
        arrival_rate = np.maximum(0.0, rate_rps * self.shares * noise)
        pause = min(self.pending_pause_s, tick)
        self.pending_pause_s -= pause
        working = tick - pause

        backlog = self.queues + arrival_rate * tick
        service_rate = opts.service_rate_rps * self.warmth()
        self.warm_s = self.warm_s + working
        processed = np.minimum(backlog, service_rate * working)
        if opts.sink_capacity_rps is not None:
            limit = opts.sink_capacity_rps * working
            total = processed.sum()
            if total > limit > 0:
                # The sink is the bottleneck: every channel is slowed by the same factor.
                factor = limit / total
                processed *= factor
                service_rate *= factor
        self.queues = backlog - processed

        waiting_s = self.queues / service_rate
        if opts.micro_batches:
            waiting_s = np.full(self.channels, waiting_s.max())
        latency = opts.base_latency_s + waiting_s + self.pending_pause_s
        snapshot = MetricsSnapshot(
            time_s=end_time_s,
            probe_latency_s=latency,
            probe_timed_out=latency > opts.probe_timeout_s,
            throughput_rps=processed / tick,
            input_rate_rps=float(arrival_rate.sum()),
            lag_records=np.full(opts.kafka_partitions, self.queues.sum() / opts.kafka_partitions),
            layout_epoch=self.layout_epoch,
            busy_share=processed / service_rate / tick,
            top_key_share=np.zeros(self.channels),  # many small keys per channel
        )
        self.last_snapshot = snapshot
        return snapshot

    def warmth(self) -> FloatArray:
        """Per channel, the share of the service rate it has reached (1 once warm)."""
        opts = self.options
        if opts.channel_warmup_s <= 0:
            return np.ones(self.channels)
        ramp = np.minimum(1.0, self.warm_s / opts.channel_warmup_s)
        return opts.cold_capacity_fraction + (1.0 - opts.cold_capacity_fraction) * ramp

    # ---------------------------------------------------------------- layout changes
    def _relayout(self, shares: FloatArray, warm_s: FloatArray) -> None:
        backlog = self.queues.sum()
        self.shares = shares / shares.sum()
        self.queues = backlog * self.shares  # unread records are routed by the new layout
        self.warm_s = warm_s
        self.layout_epoch += 1
        self.pending_pause_s += self.options.rescale_pause_s

    def rescale_even(self, channels: int) -> None:
        # Consistent hashing: the channels that stay keep their stores; the added ones are cold.
        kept = self.warm_s[:channels]
        self._relayout(np.ones(channels), np.append(kept, np.zeros(channels - kept.size)))

    def split(self, channel: int) -> None:
        half = self.shares[channel] / 2
        shares = self.shares.copy()
        shares[channel] = half
        self._relayout(np.append(shares, half), np.append(self.warm_s, 0.0))

    def merge(self, channel: int) -> None:
        n = self.channels
        if n < 2:
            raise ValueError("cannot merge the only channel")
        shares = self.shares.copy()
        given = shares[channel] / 2
        shares[(channel - 1) % n] += given
        shares[(channel + 1) % n] += given
        self._relayout(np.delete(shares, channel), np.delete(self.warm_s, channel))


class SimulatedCollector:
    """Hands the loop the snapshot of the tick the driver just simulated."""

    def __init__(self, model: StageModel) -> None:
        self.model = model

    def collect(self, now_s: float) -> MetricsSnapshot:
        if self.model.last_snapshot is None:
            raise RuntimeError("advance the model before collecting")
        return self.model.last_snapshot


class SimulatedRealizer:
    """Applies decisions to the model, as the rescale run applies them to the real layout."""

    def __init__(self, model: StageModel) -> None:
        self.model = model
        self.decisions: list[Decision] = []

    def apply(self, decision: Decision) -> None:
        if decision.action in ("scale_out", "scale_in"):
            self.model.rescale_even(decision.to_channels)
        elif decision.action == "split" and decision.channel is not None:
            self.model.split(decision.channel)
        elif decision.action == "merge" and decision.channel is not None:
            self.model.merge(decision.channel)
        else:
            raise ValueError(f"cannot realize {decision.action} (channel={decision.channel})")
        self.decisions.append(decision)


@dataclass
class SimulationRun:
    """Per-tick series of one simulated run plus the decisions taken."""

    trace: Trace
    tick_s: float
    times_s: FloatArray
    input_rate_rps: FloatArray
    channels: FloatArray
    p99_latency_s: FloatArray
    max_latency_s: FloatArray
    lag_records: FloatArray
    decisions: list[Decision] = field(default_factory=list)
    wall_time_s: float = 0.0

    @property
    def channel_seconds(self) -> float:
        return float(self.channels.sum() * self.tick_s)

    def slo_attainment(self, slo_s: float) -> float:
        return float(np.mean(self.p99_latency_s <= slo_s))


def _tick_times(trace: Trace, tick_s: float) -> FloatArray:
    return np.arange(0.0, trace.duration_s, tick_s)


def simulate_elastic(
    trace: Trace,
    model_options: StageModelOptions,
    control_options: ControlOptions,
    initial_channels: int,
    layout: LayoutKind = "uniform",
    progress: ProgressCallback | None = None,
) -> SimulationRun:
    """Run the trace through the model with the real `ElasticLoop` deciding every tick."""
    import time

    started = time.perf_counter()
    model = StageModel(model_options, initial_channels, layout)
    realizer = SimulatedRealizer(model)
    clock = ManualClock(0.0)
    loop = ElasticLoop(control_options, SimulatedCollector(model), realizer, clock)
    starts = _tick_times(trace, model_options.tick_s)
    rates = trace.rate_at(starts)
    series = _Series(starts.size)
    for i, (start, rate) in enumerate(zip(starts, rates, strict=True)):
        end = float(start + model_options.tick_s)
        channels_during_tick = model.channels
        snapshot = model.advance(float(rate), end)
        clock.set(end)
        loop.tick()
        series.record(i, snapshot, channels_during_tick)
        if progress is not None:
            progress(i + 1, starts.size)
    return series.to_run(trace, model_options.tick_s, starts, realizer.decisions, time.perf_counter() - started)


def simulate_static(
    trace: Trace, model_options: StageModelOptions, channels: int, layout: LayoutKind = "uniform"
) -> SimulationRun:
    """Run the trace through the model at a fixed channel count (no controller)."""
    model = StageModel(model_options, channels, layout)
    starts = _tick_times(trace, model_options.tick_s)
    rates = trace.rate_at(starts)
    series = _Series(starts.size)
    for i, (start, rate) in enumerate(zip(starts, rates, strict=True)):
        series.record(i, model.advance(float(rate), float(start + model_options.tick_s)), channels)
    return series.to_run(trace, model_options.tick_s, starts, [], 0.0)


class _Series:
    """Preallocated per-tick arrays of a run."""

    def __init__(self, ticks: int) -> None:
        self.input_rate = np.zeros(ticks)
        self.channels = np.zeros(ticks)
        self.p99 = np.zeros(ticks)
        self.max_latency = np.zeros(ticks)
        self.lag = np.zeros(ticks)

    def record(self, i: int, snapshot: MetricsSnapshot, channels: int) -> None:
        self.input_rate[i] = snapshot.input_rate_rps
        self.channels[i] = channels
        self.p99[i] = np.percentile(snapshot.probe_latency_s, 99)
        self.max_latency[i] = snapshot.probe_latency_s.max()
        self.lag[i] = snapshot.total_lag_records

    def to_run(
        self, trace: Trace, tick_s: float, starts: FloatArray, decisions: list[Decision], wall_time_s: float
    ) -> SimulationRun:
        return SimulationRun(
            trace=trace,
            tick_s=tick_s,
            times_s=starts,
            input_rate_rps=self.input_rate,
            channels=self.channels,
            p99_latency_s=self.p99,
            max_latency_s=self.max_latency,
            lag_records=self.lag,
            decisions=list(decisions),
            wall_time_s=wall_time_s,
        )
