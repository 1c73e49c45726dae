"""Typed, documented options of the elastic control loop, each with a default.

Like flink-autoscaler's `AutoScalerOptions`, every knob of the detectors and of the controller
lives here as a pydantic field with a default and a description, so that a Dagster sensor can
build the whole loop from run config (`ControlOptions.model_validate(config_dict)`) and the
documentation of a knob is next to its value. Times are in seconds; windows are counted in
sampling periods (one period = one probe round = one loop tick).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Options(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OverloadOptions(_Options):
    """eSault's overload detection by probe latency, per channel."""

    max_latency_s: float = Field(1.0, gt=0, description="MAX_LATENCY: a probe slower than this counts as late.")
    reaction_time: int = Field(
        3, ge=1, description="OVERLOAD_REACTION_TIME: number of sampling periods the overload window spans."
    )
    reaction_factor: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="OVERLOAD_REACTION_FACTOR: overloaded when the share of late probes in the window exceeds this.",
    )


class UnderloadOptions(_Options):
    """eSault's underload detection by throughput against the remembered peak, per channel."""

    low_watermark: float = Field(
        0.6,
        gt=0,
        lt=1,
        description="LOW_WATERMARK: a period is light when throughput < LOW_WATERMARK x the channel's peak.",
    )
    reaction_time: int = Field(
        5, ge=1, description="UNDERLOAD_REACTION_TIME: number of sampling periods the underload window spans."
    )
    reaction_factor: float = Field(
        0.6,
        ge=0,
        lt=1,
        description="UNDERLOAD_REACTION_FACTOR: underloaded when the share of light periods exceeds this.",
    )
    peak_reset_rise_factor: float = Field(
        1.25,
        gt=1,
        description="A channel whose throughput exceeds its peak by this factor marks a workload rise: "
        "all peaks restart from the current throughputs (eSault's 'clear rise in throughput').",
    )
    min_peak_rps: float = Field(
        1.0, ge=0, description="Peaks below this (records/s) are ignored: an idle channel is not 'under' anything."
    )


class CongestionOptions(_Options):
    """Congestion from Kafka lag, expressed as Gedik's congestion index in [0, 1]."""

    window: int = Field(3, ge=2, description="Number of sampling periods over which lag growth is judged.")
    growth_tolerance_s: float = Field(
        0.05,
        ge=0,
        description="Lag must grow by more than this many seconds of input (at the current input rate) in a period to "
        "count as growing; absorbs noise.",
    )
    max_lag_s: float = Field(
        3.0,
        gt=0,
        description="Lag above this many seconds of input is congestion even if it is flat (not if it drains).",
    )
    max_drain_s: float | None = Field(
        None,
        gt=0,
        description="Lag that would take longer than this many seconds to drain at the stage's recent throughput is "
        "congestion (a record arriving now would wait that long); None: not judged. Lags within the growth tolerance "
        "and draining lags never count.",
    )
    threshold: float = Field(0.6, gt=0, le=1, description="Congested when the congestion index is at least this.")
    saturation_backlog_periods: float = Field(
        1.0,
        gt=0,
        description="A period is saturated (its throughput is what the channels can do, the only kind the capacity "
        "estimate takes) when the lag at its start and at its end is at least this many periods of the stage's work "
        "and did not shrink. Below 1, a micro-batch stream's lag (a sawtooth of about one batch even when it keeps "
        "up) or a lag that merely trails a rising input would pass for a backlog.",
    )
    saturation_busy_share: float = Field(
        0.7,
        ge=0,
        le=1,
        description="Where the source measures the channels' busy shares, a period is saturated only if the "
        "channels were busy at least this share of it on average: a lag a micro-batch stream holds while keeping up "
        "can exceed a short period's work, but then its channels idle between batches.",
    )
    drain_tolerance: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="Lag (or a channel's probe latency) that shrank by at least this share over the window "
        "is draining: the stage is catching up after a rescale and is not reported as congested/overloaded again.",
    )


class SettlingOptions(_Options):
    """Periods disturbed by a rescale are not evidence: its pause and the settling after it.

    A rescale stops processing (migration, restart, cold channels): periods in which the new
    layout processed nothing read as "the stage does nothing", which P1/P5 would take for a
    rescale that lost throughput and the capacity estimate for a channel that can do nothing.
    """

    max_pause_s: float = Field(
        60.0,
        gt=0,
        description="After a layout change, periods in which the stage processed nothing are the rescale's pause "
        "(masked) for at most this long after the old layout's last period; a stage idle longer is judged (stalled). "
        "The same bound holds for a first layout's cold start (work waiting, nothing processed yet).",
    )
    settle_pause_factor: float = Field(
        1.0,
        ge=0,
        description="After processing resumes, periods within this many times the measured pause are settling "
        "(masked): the backlog of the pause drains and new channels warm up. The first resumed period, which "
        "holds the end of the pause, is always masked.",
    )
    settle_min_s: float = Field(0.0, ge=0, description="Settling masked after every rescale, whatever its pause.")


class ControllerOptions(_Options):
    """Gedik et al.'s SASO controller with levels, plus targeted split/merge and bounds."""

    min_channels: int = Field(1, ge=1, description="Never fewer channels than this.")
    max_channels: int = Field(64, ge=1, description="Never more channels than this.")
    cooldown_s: float = Field(5.0, ge=0, description="No decision until this long after the last rescale decision.")
    rescale_timeout_s: float = Field(
        300.0,
        gt=0,
        description="A rescale decided but not yet visible in the snapshots (same layout epoch and channel count) is "
        "in flight and answered by no other decision; after this long it is presumed failed and decisions resume.",
    )
    capacity_samples: int = Field(
        8,
        ge=1,
        description="Saturated periods kept for the per-channel capacity estimate (their mean less one standard "
        "deviation sizes P6 and P2); unsaturated periods only raise a lower bound.",
    )
    busy_rate_min_share: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Until a saturated period is seen, P6 sizes a scale-out by the channels' records per second of "
        "busy time (DS2's true processing rate), from periods whose channels were busy at least this share on "
        "average: below it, per-batch fixed costs weigh too much and the rate reads low (None: off; Gedik's "
        "one-level probe then stands in, free where a rescale costs nothing).",
    )
    throughput_change_factor: float = Field(
        0.15,
        gt=0,
        lt=1,
        description="P3/P4: a relative throughput change above this at the same level is a workload change, "
        "and so is an input rate this far below the one under which a lower level was congested.",
    )
    min_gain_factor: float = Field(
        0.1,
        ge=0,
        description="P1/P5: scaling up 'raised throughput' only if the throughput grew by more than this share.",
    )
    scale_out_utilization: float = Field(
        0.7,
        gt=0,
        le=1,
        description="P6 rapid scaling: when congested, jump to the smallest level whose estimated utilization "
        "(input rate / (channels x per-channel capacity)) is at most this.",
    )
    scale_in_utilization: float = Field(
        0.7,
        gt=0,
        le=1,
        description="P2 with a known capacity: scale in only to a level whose estimated utilization is at most this. "
        "Must not exceed scale_out_utilization; the band between it and congestion (utilization ~1) is where no "
        "decision is taken, like Heron's high/low watermarks.",
    )
    drain_target_s: float | None = Field(
        20.0,
        gt=0,
        description="P6 and P2 also size for draining the backlog a rescale starts with (the lag plus the input of "
        "one measured rescale pause) within this many seconds; None: size for the input only.",
    )
    drain_within_band: bool = Field(
        False,
        description="P6 drains the backlog only with channels P2 would keep at the same input (at most the count "
        "scale_in_utilization needs): more are scaled back in once the backlog is gone, a reversal planned at "
        "the scale-out; not in a period the input rose in after rising into its band, in a rise that already needed "
        "a scale-out (a rise in steps uses them for its next step; a single jump has none). False: as many as "
        "draining in drain_target_s needs.",
    )
    scale_in_input_periods: int | None = Field(
        None,
        ge=1,
        description="P2 sizes a scale-in for the highest input rate of this many recent periods (None: every period "
        "the detector windows hold, warmup_periods).",
    )
    scale_in_dwell_factor: float = Field(
        4.0,
        gt=0,
        description="After a rescale that paused processing p seconds, P2 scales in only once the input has stayed "
        "within throughput_change_factor for this many times p, and only if it saves at least 1/this share of the "
        "channels: a costly rescale is paid for a lasting fall that pays the pause back, not for each step of one.",
    )
    scale_in_hold_s: float | None = Field(
        300.0,
        gt=0,
        description="After a scale-out or split, P2 and merge wait until the input falls out of its steady band, at "
        "most this many seconds (None: no wait): a scale-in at the input that scaled out reverses it, an "
        "oscillation in a steady phase (300 s is Kubernetes' default scale-down stabilization window).",
    )
    skew_max_share: float = Field(
        0.25,
        gt=0,
        lt=1,
        description="Split instead of scaling out when the overloaded channels are at most this share of all channels "
        "(and at least one channel is not overloaded): the congestion is key skew, not load.",
    )
    skew_busy_ratio: float = Field(
        1.5,
        gt=1,
        description="Split the busiest channel when it was busy, or processed records, at least this many times as "
        "much as the median other channel over the overload window, even when every channel's probes are late "
        "(micro-batches wait for their slowest task, so lateness spreads to all channels): the congestion is that "
        "channel's keys.",
    )
    split_max_top_key_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Split a hot channel only if its most frequent key carried at most this share of its records: "
        "one key's work cannot be divided by a split.",
    )
    merge_max_share: float = Field(
        0.25,
        gt=0,
        lt=1,
        description="Merge an underloaded channel into its ring neighbours only when the underloaded channels "
        "are at most this share (otherwise the whole stage is light and P2 applies).",
    )
    enable_split_merge: bool = Field(True, description="Allow targeted split/merge (off: levels only, as in Gedik).")

    @model_validator(mode="after")
    def _check_ranges(self) -> ControllerOptions:
        if self.min_channels > self.max_channels:
            raise ValueError(f"min_channels {self.min_channels} > max_channels {self.max_channels}")
        if self.scale_in_utilization > self.scale_out_utilization:
            raise ValueError(
                "scale_in_utilization must not exceed scale_out_utilization (no hysteresis band otherwise)"
            )
        return self


class ControlOptions(_Options):
    """Everything the loop needs; build it from a plain dict (e.g. Dagster run config)."""

    overload: OverloadOptions = Field(default_factory=OverloadOptions, description="Overload detector options.")
    underload: UnderloadOptions = Field(default_factory=UnderloadOptions, description="Underload detector options.")
    congestion: CongestionOptions = Field(default_factory=CongestionOptions, description="Congestion detector options.")
    settling: SettlingOptions = Field(
        default_factory=SettlingOptions, description="What counts as a rescale's pause and settling (masked)."
    )
    controller: ControllerOptions = Field(default_factory=ControllerOptions, description="Controller options.")

    @property
    def warmup_periods(self) -> int:
        """Sampling periods after a layout change before every detector window is full again."""
        return max(self.overload.reaction_time, self.underload.reaction_time, self.congestion.window)
