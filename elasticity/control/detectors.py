"""Pure detectors: eSault overload (probe latency), eSault underload (throughput vs peak), congestion (lag).

Each detector is a function of its options and of a window of recent samples (rows = sampling
periods, oldest first; columns = channels) and returns arrays of per-channel flags, so the same
code judges 4 channels in a unit test and 1000 channels in the simulation. The windows and the
remembered peaks live in `SignalWindows`, an immutable value that `push` advances by one
snapshot; `evaluate` runs all detectors and returns the `Evaluation` the controller consumes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from elasticity.control.options import (
    CongestionOptions,
    ControlOptions,
    OverloadOptions,
    SettlingOptions,
    UnderloadOptions,
)
from elasticity.control.signals import BoolArray, CongestionSignal, Evaluation, FloatArray, MetricsSnapshot


def late_share(latency_window: FloatArray, timeout_window: BoolArray, max_latency_s: float) -> FloatArray:
    """Per channel, the share of probes in the window slower than MAX_LATENCY or timed out."""
    late = (latency_window > max_latency_s) | timeout_window
    return late.mean(axis=0)


def overload_flags(share_late: FloatArray, periods_seen: int, options: OverloadOptions) -> BoolArray:
    """eSault overload: a full window in which the share of late probes exceeds OVERLOAD_REACTION_FACTOR."""
    if periods_seen < options.reaction_time:
        return np.zeros(share_late.shape, dtype=bool)
    return share_late > options.reaction_factor


def draining_flags(latency_window: FloatArray, tolerance: float) -> BoolArray:
    """Channels whose probe latency fell by at least `tolerance` over the window: they are catching up."""
    first, last = latency_window[0], latency_window[-1]
    return (first > 0) & (last <= first * (1.0 - tolerance))


def update_peaks(
    peaks: FloatArray, throughput_rps: FloatArray, any_timeout: bool, options: UnderloadOptions
) -> tuple[FloatArray, bool]:
    """Remember each channel's peak throughput; restart all peaks on a timeout or a clear rise.

    A probe timeout means a new high-load regime, and a channel exceeding its peak by
    `peak_reset_rise_factor` means the workload changed: in both cases the old peaks describe
    a past workload, so every channel starts again from its current throughput (eSault).
    Returns (peaks, whether they were reset).
    """
    clear_rise = bool(
        np.any((peaks >= options.min_peak_rps) & (throughput_rps > peaks * options.peak_reset_rise_factor))
    )
    if any_timeout or clear_rise:
        return throughput_rps.copy(), True
    return np.maximum(peaks, throughput_rps), False


def light_flags(throughput_rps: FloatArray, peaks: FloatArray, options: UnderloadOptions) -> BoolArray:
    """Per channel, whether this period's throughput is below LOW_WATERMARK x the peak known now.

    Judged when the period arrives, against the peak of that moment (as eSault's monitor does),
    not re-judged later against a peak that may since have been reset.
    """
    return (throughput_rps < options.low_watermark * peaks) & (peaks >= options.min_peak_rps)


def underload_flags(
    share_light: FloatArray,
    periods_judged: int,
    peaks: FloatArray,
    timed_out_recently: BoolArray,
    options: UnderloadOptions,
) -> BoolArray:
    """eSault underload: in a full window, the share of light periods exceeds UNDERLOAD_REACTION_FACTOR.

    A channel whose probe timed out within the overload window is never underloaded, and a
    channel with no meaningful peak (idle since the last reset) is not judged.
    """
    if periods_judged < options.reaction_time:
        return np.zeros(peaks.shape, dtype=bool)
    return (share_light > options.reaction_factor) & (peaks >= options.min_peak_rps) & ~timed_out_recently


def congestion_signal(
    lag_window: FloatArray, input_rate_rps: float, options: CongestionOptions, throughput_rps: float | None = None
) -> CongestionSignal:
    """Gedik's congestion index from total Kafka lag over the window.

    The index is the largest of (a) the share of periods in which lag grew by more than
    `growth_tolerance_s` seconds of input, (b) a bound term that reaches `threshold` exactly
    when the lag equals `max_lag_s` seconds of input (of throughput, where the stage's known
    throughput is the higher) and (c), with `max_drain_s` set and the
    stage's `throughput_rps` known, a drain term that reaches `threshold` when the lag would
    take `max_drain_s` to drain. (a) and (b) scale with the input rate, so a rising input
    hides a stage that has fallen behind; (c) compares the lag with what the stage actually
    does. A lag that is draining does not count under (b) or (c): the stage is already
    catching up, scaling again would overshoot.
    """
    rate = max(input_rate_rps, 1e-9)
    tolerance = options.growth_tolerance_s * rate
    growth = np.diff(lag_window) > tolerance
    growth_share = float(growth.mean()) if growth.size else 0.0
    lag_now = float(lag_window[-1])
    lag_s = lag_now / rate
    first = float(lag_window[0])
    draining = first > 0 and lag_now <= first * (1.0 - options.drain_tolerance)
    # The bound is on the backlog's wait, which is the lag over the rate the stage works at when
    # that exceeds the input: right after the input falls, seconds of the new input make a backlog
    # the stage works off in seconds look like a minute (and scaled out a stage about to drain it).
    work_rate = max(rate, throughput_rps or 0.0)
    bound_term = 0.0 if draining else min(1.0, options.threshold * (lag_now / work_rate) / options.max_lag_s)
    drain_s = _drain_seconds(lag_now, throughput_rps)
    drain_term = 0.0
    if options.max_drain_s is not None and throughput_rps is not None and not draining and lag_now > tolerance:
        drain_term = min(1.0, options.threshold * drain_s / options.max_drain_s)
    index = max(growth_share, bound_term, drain_term)
    return CongestionSignal(
        index=index,
        congested=index >= options.threshold,
        lag_s=lag_s,
        growth_share=growth_share,
        draining=draining,
        drain_s=drain_s,
    )


def _drain_seconds(lag_records: float, throughput_rps: float | None) -> float:
    if lag_records <= 0:
        return 0.0
    if not throughput_rps or throughput_rps <= 0:
        return float("inf")
    return lag_records / throughput_rps


def saturated_period(
    lag_before: float,
    lag_after: float,
    throughput_rps: float,
    period_s: float,
    min_backlog_periods: float,
    busy_share: float | None = None,
    min_busy_share: float = 0.0,
) -> bool:
    """Whether a period's throughput is what the stage can do: a backlog throughout it (at least
    `min_backlog_periods` of the period's work at its start and at its end) that did not shrink,
    so the channels never ran out of input, and, where the channels' mean `busy_share` is
    measured, channels busy at least `min_busy_share` of the period.

    A congestion found while the input rises can read a throughput bounded by the input, not by
    the channels (micro-batches trail the input and their lag is a sawtooth of about a batch);
    only a backlog that stays above that bound rules it out. The lag alone cannot tell a backlog
    from the sawtooth when the period is shorter than a batch cycle: a stream keeping up at
    40 records/s holds ~150 records, four periods of its work at 2.5 s ticks, while its one
    channel idles 80 % of the time. Idle channels are not at their capacity, whatever the lag.
    """
    work = throughput_rps * period_s
    backlog = min(lag_before, lag_after)
    behind = work > 0 and backlog > 0 and backlog >= min_backlog_periods * work and lag_after >= lag_before
    return behind and (busy_share is None or busy_share >= min_busy_share)


def _push_row(window: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Append `row` as the newest row of a fixed-height window, dropping the oldest."""
    return np.concatenate([window[1:], row[np.newaxis, ...]], axis=0)


@dataclass(frozen=True)
class SignalWindows:
    """The detectors' memory: sliding windows since the last layout change, plus peaks.

    `periods_seen` counts samples since the last reset (capped by nothing; windows simply
    hold the last rows). Arrays are never mutated in place: `push` returns a new value.
    """

    channels: int
    layout_epoch: int
    periods_seen: int
    latency: FloatArray  # [overload.reaction_time, channels]
    timed_out: BoolArray  # [overload.reaction_time, channels]
    throughput: FloatArray  # [underload.reaction_time, channels]
    light: BoolArray  # [underload.reaction_time, channels], periods judged light when they arrived
    periods_since_peak_reset: int
    lag: FloatArray  # [congestion.window]
    input_rate: FloatArray  # [warmup_periods]
    peaks: FloatArray  # [channels]
    busy: FloatArray | None = None  # [overload.reaction_time, channels] share of each period busy; None: unknown
    last_time_s: float | None = None  # the newest snapshot seen, pushed or masked
    last_lag_records: float | None = None  # its lag: the broker's count, true even in a masked period
    rescaled_at_s: float | None = None  # entered by a layout change: the old layout's last snapshot time
    paused_until_s: float | None = None  # the newest snapshot of this layout in which nothing was processed
    resumed_at_s: float | None = None  # the first snapshot of this layout after the pause
    pause_s: float = 0.0  # measured pause of the rescale that made this layout
    settle_until_s: float | None = None  # snapshots up to this time are settling (masked)
    started_at_s: float | None = None  # the first layout's first snapshot (its cold start is masked)

    @classmethod
    def empty(cls, channels: int, layout_epoch: int, options: ControlOptions) -> SignalWindows:
        return cls(
            channels=channels,
            layout_epoch=layout_epoch,
            periods_seen=0,
            latency=np.zeros((options.overload.reaction_time, channels)),
            timed_out=np.zeros((options.overload.reaction_time, channels), dtype=bool),
            throughput=np.zeros((options.underload.reaction_time, channels)),
            light=np.zeros((options.underload.reaction_time, channels), dtype=bool),
            periods_since_peak_reset=0,
            lag=np.zeros(options.congestion.window),
            input_rate=np.zeros(options.warmup_periods),
            peaks=np.zeros(channels),
        )

    def after_rescale(self, snapshot: MetricsSnapshot, options: ControlOptions) -> SignalWindows:
        """Fresh windows for the snapshot's new layout, remembering when the old one was last seen
        and its lag then (the broker's count, the start of the new layout's first period)."""
        fresh = SignalWindows.empty(snapshot.channels, snapshot.layout_epoch, options)
        return replace(
            fresh, rescaled_at_s=self.last_time_s, last_time_s=self.last_time_s, last_lag_records=self.last_lag_records
        )

    def settle(self, snapshot: MetricsSnapshot, options: SettlingOptions) -> tuple[SignalWindows, bool]:
        """Track the rescale's pause and settling; (windows, whether the snapshot is masked).

        The pause is the run of periods after the layout change in which nothing was processed
        (measured from the old layout's last snapshot to the newest such period, so at the
        sampling resolution); the first period that processed something still holds the end of
        the pause and is masked too, and so are the periods up to `settle_pause_factor` x the
        pause (or `settle_min_s`) after it. A first layout (no change seen) has a cold start
        instead (`_settle_first_layout`).
        """
        at = snapshot.time_s
        timed = replace(self, last_time_s=at, last_lag_records=snapshot.total_lag_records)
        if self.rescaled_at_s is None:
            return self._settle_first_layout(timed, snapshot, options)
        if self.resumed_at_s is None:
            idle = snapshot.total_throughput_rps <= 0
            if idle and at - self.rescaled_at_s <= options.max_pause_s:
                return replace(timed, paused_until_s=at, pause_s=at - self.rescaled_at_s), True
            last_idle = self.paused_until_s if self.paused_until_s is not None else self.rescaled_at_s
            pause = last_idle - self.rescaled_at_s
            if idle:  # idle beyond max_pause_s: stalled, not paused; judge it from now on
                return replace(timed, resumed_at_s=at, pause_s=at - self.rescaled_at_s, settle_until_s=at), False
            settle = max(options.settle_min_s, options.settle_pause_factor * pause)
            return replace(timed, resumed_at_s=at, pause_s=pause, settle_until_s=at + settle), True
        masked = self.settle_until_s is not None and at <= self.settle_until_s
        return timed, masked

    def _settle_first_layout(
        self, timed: SignalWindows, snapshot: MetricsSnapshot, options: SettlingOptions
    ) -> tuple[SignalWindows, bool]:
        """The first layout's cold start: until a period first processes something, a period in
        which work waited (input or lag) but nothing was processed is masked, for at most
        `max_pause_s` after the first snapshot. Its first batches run on cold workers, and one with
        data can outlast several periods: judged, those periods read as a congested stage that
        does nothing (a scale-out, where a loaded host's Zipf load needed a split). A period with
        nothing to do is judged: an idle stage may be scaled in."""
        at = snapshot.time_s
        started = at if self.last_time_s is None else self.started_at_s
        timed = replace(timed, started_at_s=started)
        if self.resumed_at_s is not None or started is None:  # None: a cursor from before this field
            return timed, False
        if snapshot.total_throughput_rps > 0:
            return replace(timed, resumed_at_s=at), False
        waiting = snapshot.total_lag_records > 0 or snapshot.input_rate_rps > 0
        return timed, waiting and at - started <= options.max_pause_s

    def matches(self, snapshot: MetricsSnapshot) -> bool:
        """Whether the snapshot belongs to the same layout (same channel count and epoch)."""
        return self.channels == snapshot.channels and self.layout_epoch == snapshot.layout_epoch

    def push(self, snapshot: MetricsSnapshot, options: UnderloadOptions) -> SignalWindows:
        peaks, reset = update_peaks(self.peaks, snapshot.throughput_rps, bool(snapshot.probe_timed_out.any()), options)
        # Light periods were judged against the peaks just invalidated: forget them too.
        light = np.zeros_like(self.light) if reset else self.light
        return replace(
            self,
            periods_seen=self.periods_seen + 1,
            latency=_push_row(self.latency, snapshot.probe_latency_s),
            timed_out=_push_row(self.timed_out, snapshot.probe_timed_out),
            throughput=_push_row(self.throughput, snapshot.throughput_rps),
            light=_push_row(light, light_flags(snapshot.throughput_rps, peaks, options)),
            periods_since_peak_reset=1 if reset else self.periods_since_peak_reset + 1,
            lag=_push_row(self.lag, np.array(snapshot.total_lag_records)),
            input_rate=_push_row(self.input_rate, np.array(snapshot.input_rate_rps)),
            peaks=peaks,
            busy=self._pushed_busy(snapshot),
        )

    def _pushed_busy(self, snapshot: MetricsSnapshot) -> FloatArray | None:
        if snapshot.busy_share is None:
            return None  # a source without busy shares: the window would mix measured and unknown
        window = self.busy if self.busy is not None else np.zeros_like(self.latency)
        return _push_row(window, snapshot.busy_share)

    def busy_share(self) -> FloatArray | None:
        """Per channel, the mean share of the window's periods it spent processing (None: unknown)."""
        if self.busy is None:
            return None
        filled = max(1, min(self.periods_seen, self.busy.shape[0]))
        return np.asarray(self.busy[-filled:].mean(axis=0), dtype=np.float64)

    def channel_throughput(self) -> FloatArray:
        """Per channel, its mean throughput over the periods `busy_share` covers (as far as the
        throughput window reaches back)."""
        filled = max(1, min(self.periods_seen, self.latency.shape[0], self.throughput.shape[0]))
        return np.asarray(self.throughput[-filled:].mean(axis=0), dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "channels": self.channels,
            "layout_epoch": self.layout_epoch,
            "periods_seen": self.periods_seen,
            "latency": self.latency.tolist(),
            "timed_out": self.timed_out.tolist(),
            "throughput": self.throughput.tolist(),
            "light": self.light.tolist(),
            "periods_since_peak_reset": self.periods_since_peak_reset,
            "lag": self.lag.tolist(),
            "input_rate": self.input_rate.tolist(),
            "peaks": self.peaks.tolist(),
            "busy": None if self.busy is None else self.busy.tolist(),
            "last_time_s": self.last_time_s,
            "last_lag_records": self.last_lag_records,
            "rescaled_at_s": self.rescaled_at_s,
            "paused_until_s": self.paused_until_s,
            "resumed_at_s": self.resumed_at_s,
            "pause_s": self.pause_s,
            "settle_until_s": self.settle_until_s,
            "started_at_s": self.started_at_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], options: ControlOptions) -> SignalWindows:
        channels = int(data["channels"])
        windows = cls(
            channels=channels,
            layout_epoch=int(data["layout_epoch"]),
            periods_seen=int(data["periods_seen"]),
            latency=np.asarray(data["latency"], dtype=np.float64).reshape(-1, channels),
            timed_out=np.asarray(data["timed_out"], dtype=bool).reshape(-1, channels),
            throughput=np.asarray(data["throughput"], dtype=np.float64).reshape(-1, channels),
            light=np.asarray(data["light"], dtype=bool).reshape(-1, channels),
            periods_since_peak_reset=int(data["periods_since_peak_reset"]),
            lag=np.asarray(data["lag"], dtype=np.float64),
            input_rate=np.asarray(data["input_rate"], dtype=np.float64),
            peaks=np.asarray(data["peaks"], dtype=np.float64),
            busy=None if data.get("busy") is None else np.asarray(data["busy"], dtype=np.float64).reshape(-1, channels),
            last_time_s=_optional_float(data.get("last_time_s")),
            last_lag_records=_optional_float(data.get("last_lag_records")),
            rescaled_at_s=_optional_float(data.get("rescaled_at_s")),
            paused_until_s=_optional_float(data.get("paused_until_s")),
            resumed_at_s=_optional_float(data.get("resumed_at_s")),
            pause_s=float(data.get("pause_s", 0.0)),
            settle_until_s=_optional_float(data.get("settle_until_s")),
            started_at_s=_optional_float(data.get("started_at_s")),
        )
        expected = cls.empty(channels, windows.layout_epoch, options)
        if any(
            getattr(windows, name).shape != getattr(expected, name).shape
            for name in ("latency", "timed_out", "throughput", "light", "lag", "input_rate", "peaks")
        ) or (windows.busy is not None and windows.busy.shape != expected.latency.shape):
            # The options changed the window sizes since the state was saved: start afresh.
            return expected
        return windows


def busy_time_rate(throughput_rps: FloatArray, busy_share: FloatArray | None, min_share: float | None) -> float | None:
    """Records one channel processes per second of busy time (DS2's true processing rate): the
    period's records over its channels' busy time. Unlike the throughput, it is not bounded by the
    input; None when busy shares are not measured or the channels were busy less than `min_share`
    of the period on average (a batch's fixed costs then weigh too much)."""
    if busy_share is None or min_share is None or busy_share.size == 0:
        return None
    busy = float(np.sum(busy_share))
    if busy <= 0 or busy / busy_share.size < min_share:
        return None
    return float(np.sum(throughput_rps)) / busy


def batch_overhead_share(
    batch_cycle_s: float | None, busy_share: FloatArray | None, max_latency_s: float
) -> float | None:
    """The share of the cycle a latency bound allows that a period's micro-batches spent outside
    their channels: (1 - b) c / (L / 2) for a busiest channel busy a share b of a c-second cycle
    and a bound of L; None where no cycle or busy share is measured (a stream that is no
    micro-batch stream, the fluid model).

    A batch whose busiest channel worked a share b of a cycle of c seconds spent (1 - b) c
    elsewhere (the trigger, the source, the shuffle, the write, the commit), and every batch pays
    it again. A record waits for the batch running when it arrives and then for its own, so a
    stage meets a bound of L with cycles of L / 2, of which its channels work L / 2 - (1 - b) c.
    The busiest channel's work is the batch's critical path; the others' idle time is not overhead."""
    if batch_cycle_s is None or busy_share is None or busy_share.size == 0:
        return None
    return batch_cycle_s * (1.0 - min(1.0, float(np.max(busy_share)))) / (max_latency_s / 2.0)


def sustainable_rate(busy_rate_rps: float, overhead_share: float | None) -> float | None:
    """A busy-time rate less what a micro-batch stream pays outside its channels
    (`batch_overhead_share`): a channel sustains busy_rate x (1 - share) at the cycle the latency
    bound allows. The rate as it is where no overhead is measured; None where the overhead alone
    takes the whole cycle (no rate meets the bound).

    The eSault bench's run 2 at 0f8ba15 sized its first scale-out by 248 rec/s of busy time,
    1 -> 2, where channels delivered 174-197 rec/s at saturation, and the stage stayed behind
    until its next decision; with the busy share and cycle of that decision's period (40 % of
    4.6 s) and its 15-s bound, the 248 nets to 157."""
    if overhead_share is None:
        return busy_rate_rps
    usable = 1.0 - overhead_share
    return busy_rate_rps * usable if usable > 0 else None


def _recent_max_input(windows: SignalWindows, seen: int, periods: int | None) -> float:
    """The highest input rate of the last `periods` periods seen in this layout (None: the whole window)."""
    size = windows.input_rate.size if periods is None else min(periods, windows.input_rate.size)
    return float(windows.input_rate[-max(1, min(seen, size)) :].max())


def _backlog_throughout(
    snapshot: MetricsSnapshot, start: tuple[float, float], options: CongestionOptions, busy_share: float | None
) -> bool:
    """`saturated_period` over the period from `start` (time, lag of the previous snapshot) to
    the snapshot; a busy share of None is not judged."""
    start_time_s, start_lag = start
    return saturated_period(
        start_lag,
        snapshot.total_lag_records,
        snapshot.total_throughput_rps,
        snapshot.time_s - start_time_s,
        options.saturation_backlog_periods,
        busy_share,
        options.saturation_busy_share,
    )


def outrun_at_busy_ceiling(
    snapshot: MetricsSnapshot, previous_lag: float | None, channels: int | None
) -> tuple[bool, float | None]:
    """(whether `channels` are too small for the input at any batch overhead, the busy-time
    ceiling per channel): the input beyond what they could process if they were busy all the time
    (this period's records per second of busy time, whatever the share), with a lag that grew
    over the period. `channels` None: not asked (a judged period, or a first layout).

    Asked of a rescaled layout's settling period, which holds its first batch, and of the periods
    that await a committed layout's first batch (`MetricsSnapshot.awaited`). Neither period's
    delivered rate is evidence of the layout's capacity (a cold first batch; the layout before);
    the busy-time rate bounds it: the eSault bench's batches read 242-248 rec/s a channel in a
    new layout's first batch and 237-249 in the warm ones after it, at 1 to 8 channels
    (2026-12-02). A layout taking in more than that ceiling falls behind whatever it does next,
    and waiting for its judged period costs a batch or two of backlog and, on a slow machine,
    the rise's next step (the late second decision, BENCHMARKS section 5).

    The input is the current one (`MetricsSnapshot.current_input_rate_rps`): a period that began
    before a step of the input averages the step away (a slow machine's awaiting tick read ~300
    rec/s two seconds after a step to 533, and waited)."""
    ceiling = busy_time_rate(snapshot.throughput_rps, snapshot.busy_share, min_share=0.0)
    if channels is None or previous_lag is None or not ceiling:
        return False, ceiling
    grew = snapshot.total_lag_records > previous_lag
    return grew and snapshot.current_input_rate_rps > ceiling * channels, ceiling


def within_sustained_ceiling(
    snapshot: MetricsSnapshot, ceiling_rps: float | None, overhead_share: float | None
) -> bool:
    """Whether the period's input is within what its channels sustain at their busy-time ceiling
    (`ceiling_rps` a channel), net of the period's batch overhead (`overhead_share`,
    `sustainable_rate`); False where the ceiling or the busy shares are unknown.

    A stream keeping up with a trickle holds a batch or two of input in flight, and a period that
    delivered a little less than it took in then looks like a backlog that did not shrink: the
    eSault bench's one channel after 4 -> 1 at 66cbdda took in 37 rec/s, was busy 18 % of 4.2-s
    cycles at ~200 rec/s of busy time (~110 sustained), and was judged outgrown (1 -> 2, an
    oscillation). An outgrown layout is far beyond that ceiling: the 2 channels of the saved eSault
    runs' outgrown decisions took in 530-810 rec/s where they sustained 280-420 by this reading."""
    if not ceiling_rps or snapshot.busy_share is None:
        return False
    sustained = sustainable_rate(ceiling_rps, overhead_share)
    return sustained is not None and snapshot.input_rate_rps <= sustained * snapshot.channels


def _layout_asked_if_outrun(windows: SignalWindows, snapshot: MetricsSnapshot, masked: bool) -> int | None:
    """The channels `outrun_at_busy_ceiling` asks about: the awaited layout's, or a rescaled
    layout's once it processed something again while settling; None for any other period."""
    if snapshot.awaited is not None:
        return snapshot.awaited.channels
    resumed_after_rescale = windows.rescaled_at_s is not None and windows.resumed_at_s is not None
    return snapshot.channels if masked and resumed_after_rescale else None


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def evaluate(
    windows: SignalWindows | None, snapshot: MetricsSnapshot, options: ControlOptions
) -> tuple[SignalWindows, Evaluation]:
    """Advance the windows by one snapshot and run every detector on them.

    A snapshot of a different layout (channel count or epoch changed) restarts the windows:
    measurements of the old layout say nothing about the new channels. The rescale's pause and
    settling (`SignalWindows.settle`) do not enter the windows at all: a period that processed
    nothing because the stage was being rescaled is no evidence of anything.
    """
    if windows is None:
        windows = SignalWindows.empty(snapshot.channels, snapshot.layout_epoch, options)
    elif not windows.matches(snapshot):
        windows = windows.after_rescale(snapshot, options)
    # The period's start: the previous snapshot, also when it was masked (the first period after
    # a rescale's settling is judged too: its lag at the start is the broker's, not the pause's).
    previous_time_s, previous_lag = windows.last_time_s, windows.last_lag_records
    windows, masked = windows.settle(snapshot, options.settling)
    # The layout before a committed rescale: no evidence of either layout (`MetricsSnapshot.awaited`).
    masked = masked or snapshot.awaited is not None
    if not masked:
        windows = windows.push(snapshot, options.underload)
    seen = windows.periods_seen
    start = None if masked or previous_time_s is None or previous_lag is None else (previous_time_s, previous_lag)
    busy = None if snapshot.busy_share is None else float(np.mean(snapshot.busy_share))
    saturated = start is not None and _backlog_throughout(snapshot, start, options.congestion, busy)
    outrun, ceiling = outrun_at_busy_ceiling(snapshot, previous_lag, _layout_asked_if_outrun(windows, snapshot, masked))
    overhead = batch_overhead_share(snapshot.batch_cycle_s, snapshot.busy_share, options.overload.max_latency_s)
    # Behind whatever the busy share (a micro-batch stream's channels idle between its batches even
    # when it is far behind), taking in more than the change factor beyond what it processed, and
    # more than its channels could sustain (a trickle's batches in flight are no backlog).
    outpaced = (
        start is not None
        and snapshot.input_rate_rps > snapshot.total_throughput_rps * (1 + options.controller.throughput_change_factor)
        and _backlog_throughout(snapshot, start, options.congestion, None)
        and not within_sustained_ceiling(snapshot, ceiling, overhead)
    )

    share_late = late_share(windows.latency, windows.timed_out, options.overload.max_latency_s)
    draining = draining_flags(windows.latency, options.congestion.drain_tolerance)
    overloaded = overload_flags(share_late, seen, options.overload) & ~draining
    timed_out_recently: BoolArray = np.asarray(windows.timed_out.any(axis=0), dtype=bool)
    share_light = windows.light.mean(axis=0)
    underloaded = underload_flags(
        share_light, windows.periods_since_peak_reset, windows.peaks, timed_out_recently, options.underload
    )
    # The median of the recent stage throughputs: one period hit by a rescale pause must not
    # make P5 believe that scaling up lost throughput.
    filled_up = max(1, min(seen, options.overload.reaction_time, options.congestion.window))
    recent_throughput = np.median(windows.throughput[-filled_up:].sum(axis=1))
    congestion = congestion_signal(windows.lag, snapshot.input_rate_rps, options.congestion, float(recent_throughput))
    evaluation = Evaluation(
        time_s=snapshot.time_s,
        channels=snapshot.channels,
        layout_epoch=snapshot.layout_epoch,
        ready_up=not masked and seen >= max(options.overload.reaction_time, options.congestion.window),
        ready_down=not masked and seen >= options.warmup_periods,
        overloaded=overloaded,
        underloaded=underloaded,
        late_share=share_late,
        light_share=share_light,
        latest_latency_s=snapshot.probe_latency_s,
        latest_throughput_rps=snapshot.throughput_rps,
        # A settling period enters no window: its own throughput is all it says (`outrun`).
        total_throughput_rps=snapshot.total_throughput_rps if masked else float(recent_throughput),
        # An outrun layout is sized for the input it is outrun by.
        input_rate_rps=snapshot.current_input_rate_rps if outrun else snapshot.input_rate_rps,
        recent_max_input_rate_rps=_recent_max_input(windows, seen, options.controller.scale_in_input_periods),
        total_lag_records=snapshot.total_lag_records,
        congestion=congestion,
        timeout_in_window=bool(timed_out_recently.any()),
        saturated=saturated,
        busy_rate_rps=None
        if masked
        else busy_time_rate(snapshot.throughput_rps, snapshot.busy_share, options.controller.busy_rate_min_share),
        batch_overhead_share=None if masked else overhead,
        settling=masked,
        after_rescale=windows.rescaled_at_s is not None,
        outpaced=outpaced,
        outrun=outrun,
        busy_ceiling_rps=ceiling,
        awaited=snapshot.awaited,
        rescale_pause_s=windows.pause_s,
        busy_share=windows.busy_share(),
        channel_throughput_rps=windows.channel_throughput(),
        top_key_share=snapshot.top_key_share,
        batch_cycle_s=snapshot.batch_cycle_s,
        periods_judged=seen,
        recent_input_rate_rps=snapshot.recent_input_rate_rps,
    )
    return windows, evaluation
