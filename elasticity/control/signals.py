"""The data that flows through the loop: the per-tick metrics snapshot and the evaluated signals.

`MetricsSnapshot` is what a `MetricsCollector` returns once per sampling period (the real
collector reads probes, progress events and Kafka offsets; the simulation computes the same
fields from its queueing model). `Evaluation` is what the evaluator derives from the recent
snapshots with the detectors, and the only input of the controller. Per-channel values are
numpy arrays indexed by channel id 0..channels-1 so that 1000 channels cost microseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


def _as_float_array(values: Sequence[float] | FloatArray) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"expected a 1-d sequence, got shape {array.shape}")
    return array


def _per_channel(values: Sequence[float] | FloatArray | None, channels: int, what: str) -> FloatArray | None:
    if values is None:
        return None
    array = _as_float_array(values)
    if array.size != channels:
        raise ValueError(f"{array.size} {what} for {channels} channels")
    return array


@dataclass(frozen=True)
class CommittedLayout:
    """A layout a rescale committed, whose first batch has not reported yet."""

    epoch: int
    channels: int


@dataclass(frozen=True)
class MetricsSnapshot:
    """One sampling period of metrics, as the collector sees it.

    probe_latency_s: latency of this period's probe per channel (a timed-out probe may carry any
        value; `probe_timed_out` is authoritative).
    probe_timed_out: whether the channel's probe did not come back within the probe timeout.
    throughput_rps: records the channel processed per second since the previous probe.
    input_rate_rps: records per second produced into the input topic (from broker end offsets).
    lag_records: per Kafka partition, broker end offset minus the query's committed end offset.
    layout_epoch: epoch of the partition layout the channels belong to; a change resets windows.
    busy_share: per channel, the share of the period it spent processing (None: not measured). In
        micro-batches every channel's probes wait for the slowest task, so lateness alone cannot
        tell a hot channel from a loaded stage; the work each channel did can.
    top_key_share: per channel, the share of its records that its most frequent key carried in
        the period (None: not measured); a channel whose work is one key gains nothing by a split.
    batch_cycle_s: seconds from one micro-batch's end to the next's in the period (None: not a
        micro-batch stream, or not measured). Lag read against the last committed batch holds,
        in a stream that keeps up, the batch running plus what arrives while it runs: up to two
        cycles of input that are in flight, not a backlog.
    awaited: a rescale committed this layout and no batch of it has reported yet (None: the
        channels are those of the layout in effect). The per-channel fields are then the layout
        before it (its last batches); the input rate and the lag are the broker's, true for both.
    recent_input_rate_rps: records per second produced over the last few seconds only (None: not
        read). The period's rate averages a step of the input with what came before it; whether a
        new layout is already outrun (`detectors.outrun_at_busy_ceiling`) is a question about now.
    """

    time_s: float
    probe_latency_s: FloatArray
    probe_timed_out: BoolArray
    throughput_rps: FloatArray
    input_rate_rps: float
    lag_records: FloatArray
    layout_epoch: int = 0
    busy_share: FloatArray | None = None
    top_key_share: FloatArray | None = None
    batch_cycle_s: float | None = None
    awaited: CommittedLayout | None = None
    recent_input_rate_rps: float | None = None

    @classmethod
    def build(
        cls,
        *,
        time_s: float,
        probe_latency_s: Sequence[float] | FloatArray,
        throughput_rps: Sequence[float] | FloatArray,
        input_rate_rps: float,
        lag_records: Sequence[float] | FloatArray,
        probe_timed_out: Sequence[bool] | BoolArray | None = None,
        layout_epoch: int = 0,
        busy_share: Sequence[float] | FloatArray | None = None,
        top_key_share: Sequence[float] | FloatArray | None = None,
        batch_cycle_s: float | None = None,
        awaited: CommittedLayout | None = None,
        recent_input_rate_rps: float | None = None,
    ) -> MetricsSnapshot:
        """Build from plain sequences (what a real collector has), checking that lengths agree."""
        latency = _as_float_array(probe_latency_s)
        throughput = _as_float_array(throughput_rps)
        if latency.shape != throughput.shape:
            raise ValueError(f"{latency.size} probe latencies but {throughput.size} throughputs")
        if latency.size == 0:
            raise ValueError("a snapshot needs at least one channel")
        timed_out = (
            np.zeros(latency.size, dtype=bool) if probe_timed_out is None else np.asarray(probe_timed_out, dtype=bool)
        )
        if timed_out.shape != latency.shape:
            raise ValueError(f"{timed_out.size} timeout flags for {latency.size} channels")
        busy = _per_channel(busy_share, latency.size, "busy shares")
        top_share = _per_channel(top_key_share, latency.size, "top-key shares")
        return cls(
            time_s=float(time_s),
            probe_latency_s=latency,
            probe_timed_out=timed_out,
            throughput_rps=throughput,
            input_rate_rps=float(input_rate_rps),
            lag_records=_as_float_array(lag_records),
            layout_epoch=int(layout_epoch),
            busy_share=busy,
            top_key_share=top_share,
            batch_cycle_s=None if batch_cycle_s is None else float(batch_cycle_s),
            awaited=awaited,
            recent_input_rate_rps=None if recent_input_rate_rps is None else float(recent_input_rate_rps),
        )

    @property
    def current_input_rate_rps(self) -> float:
        """The input rate as of now (`input_of_now`)."""
        return input_of_now(self.input_rate_rps, self.recent_input_rate_rps)

    @property
    def channels(self) -> int:
        return int(self.probe_latency_s.size)

    @property
    def total_lag_records(self) -> float:
        return float(self.lag_records.sum())

    @property
    def total_throughput_rps(self) -> float:
        return float(self.throughput_rps.sum())


@dataclass(frozen=True)
class CongestionSignal:
    """Gedik's congestion index derived from Kafka lag: `index` in [0, 1] and `congested`."""

    index: float
    congested: bool
    lag_s: float
    growth_share: float
    draining: bool
    drain_s: float = 0.0
    """Seconds the lag would take to drain at the recent throughput (inf when nothing was processed)."""


@dataclass(frozen=True)
class Evaluation:
    """What the detectors concluded for one tick; the controller's only input.

    ready_up: the overload and congestion windows are full since the last layout change, so
        scale-out/split decisions may be taken. ready_down: the underload window is full too, so
        scale-in/merge decisions may be taken (deliberately later: shrinking is never urgent).
    recent_max_input_rate_rps: the highest input rate of the last `scale_in_input_periods`
        periods (default `warmup_periods`); scale-in sizes for it, so one quiet period does not
        shrink the stage.
    overloaded: per channel, eSault overload AND its latency is not draining (a channel
        catching up after a rescale is not asked to split again).
    saturated: this period had a backlog of at least one period's work at its start and at its
        end, so the stage never ran out of input: its throughput is what the channels can do
        (the only periods the capacity estimate is taken from).
    busy_rate_rps: records one channel processed per second of its busy time this period (DS2's
        true processing rate), when the snapshots carry busy shares and the channels were busy
        enough for it to be read (`ControllerOptions.busy_rate_min_share`); None otherwise.
    batch_overhead_share: the share of the cycle the latency bound allows that this period's
        micro-batches spent outside their channels (`detectors.batch_overhead_share`); None in a
        settling period or where no cycle or busy share is measured.
    settling: this period is part of a rescale's pause or of the settling after it; it did not
        enter the windows, and neither ready flag is set.
    after_rescale: the layout was entered by a rescale seen in the snapshots (not the first
        layout the windows saw, whose first batches pay for a cold start instead).
    outpaced: this period had a backlog throughout that did not shrink (as for `saturated`, but
        whatever the channels' busy share) and took in more than the change factor beyond what
        it processed, and more than its channels sustain at their busy-time ceiling where that
        is measured (`detectors.within_sustained_ceiling`): the stage is behind and falling
        further behind, not a trickle with a batch or two in flight.
    outrun: a settling period after a rescale, once processing resumed (a new layout's first
        batch), or a period awaiting a committed layout (`awaited`), in which the input exceeded
        what that layout's channels could process busy all the time (`busy_ceiling_rps` each),
        with a growing lag (`detectors.outrun_at_busy_ceiling`): too small whatever the batch
        overhead, so judged outgrown at once rather than one or two batches later.
    busy_ceiling_rps: records one channel processed per second of its busy time this period,
        whatever the share (None: no busy time measured).
    awaited: the layout a committed rescale made, whose first batch has not reported
        (`MetricsSnapshot.awaited`); the rest of the evaluation is of the layout before it.
    rescale_pause_s: the pause of the last rescale as measured (periods with nothing processed).
    busy_share: per channel, the mean share of the periods in the overload window it spent
        processing (None when the snapshots carry no busy shares).
    channel_throughput_rps: per channel, its mean throughput over the periods `busy_share` covers
        (None where the evaluation was built without windows).
    top_key_share: per channel, the newest period's share of its records on its most frequent key.
    batch_cycle_s: the newest period's micro-batch cycle (`MetricsSnapshot.batch_cycle_s`).
    periods_judged: the periods of this layout in the windows (0 while it settles or starts cold).
    recent_input_rate_rps: the input over the period's last few seconds
        (`MetricsSnapshot.recent_input_rate_rps`; None: not read). An outgrown layout is sized for
        it: a period that a step of the input crossed averages the step away.
    """

    time_s: float
    channels: int
    layout_epoch: int
    ready_up: bool
    ready_down: bool
    overloaded: BoolArray
    underloaded: BoolArray
    late_share: FloatArray
    light_share: FloatArray
    latest_latency_s: FloatArray
    latest_throughput_rps: FloatArray
    total_throughput_rps: float
    input_rate_rps: float
    recent_max_input_rate_rps: float
    total_lag_records: float
    congestion: CongestionSignal
    timeout_in_window: bool
    saturated: bool = False
    busy_rate_rps: float | None = None
    batch_overhead_share: float | None = None
    settling: bool = False
    after_rescale: bool = False
    outpaced: bool = False
    outrun: bool = False
    busy_ceiling_rps: float | None = None
    awaited: CommittedLayout | None = None
    rescale_pause_s: float = 0.0
    busy_share: FloatArray | None = None
    channel_throughput_rps: FloatArray | None = None
    top_key_share: FloatArray | None = None
    batch_cycle_s: float | None = None
    periods_judged: int = 0
    recent_input_rate_rps: float | None = None

    @property
    def current_input_rate_rps(self) -> float:
        """The input rate as of now (`input_of_now`)."""
        return input_of_now(self.input_rate_rps, self.recent_input_rate_rps)

    @property
    def deciding_layout(self) -> CommittedLayout:
        """The layout a decision of this tick would change: the awaited one, else the evaluated one."""
        return self.awaited or CommittedLayout(self.layout_epoch, self.channels)

    @property
    def in_flight_records(self) -> float:
        """The lag a micro-batch stream shows while it keeps up with the input: two batch cycles
        of input (0 when the cycle is not measured)."""
        return 0.0 if self.batch_cycle_s is None else 2.0 * self.input_rate_rps * self.batch_cycle_s

    @property
    def backlog_records(self) -> float:
        """The lag that is behind: all of it in a congested, outpaced or outrun stage (its batches
        are long because it is behind, and every record of them is late); in one that keeps up, the
        lag beyond the records in flight, which no number of channels drains faster."""
        if self.congested or self.outpaced or self.outrun:
            return self.total_lag_records
        return max(0.0, self.total_lag_records - self.in_flight_records)

    @property
    def overloaded_channels(self) -> list[int]:
        return [int(c) for c in np.flatnonzero(self.overloaded)]

    @property
    def underloaded_channels(self) -> list[int]:
        return [int(c) for c in np.flatnonzero(self.underloaded)]

    @property
    def congested(self) -> bool:
        """Congestion as the controller sees it: lag congestion, or any channel persistently overloaded
        while the stage's lag is not draining.

        Probe latency is the SLO; waiting for lag to cross its bound would let latency breach it.
        But while the lag drains (a backlog worked off after a rescale) latency is high because of
        the backlog, not the load: a channel whose own latency fell a little less than the others'
        is not a reason for another rescale.
        """
        return self.congestion.congested or (bool(self.overloaded.any()) and not self.congestion.draining)


def input_of_now(period_rps: float, recent_rps: float | None) -> float:
    """The input rate as of now: the last few seconds' when read, else the period's."""
    return period_rps if recent_rps is None else recent_rps
