"""Typed, documented options of As-Stream (seed 002), each with a default and a one-line description.

The same pattern as `elasticity.control.options` (flink-autoscaler's `AutoScalerOptions`): one
frozen pydantic model a Dagster sensor can build from run config with `model_validate`. The
paper leaves several thresholds to "the configuration file" (§2.2 step 5–6: the bottleneck
interval, "several times", "the same order of magnitude"); here each one is a named field.
Times are in seconds; rows are counted per monitoring window (one sample = one window Δw).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from elasticity.layout import MAX_CHANNELS

BottleneckValueSource = Literal["fitted", "observed"]
PlanningPolicyName = Literal["parameter_plan"]


class AsStreamOptions(BaseModel):
    """Everything As-Stream's identification, plan generation and prediction need."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    monitoring_period_s: float = Field(
        60.0,
        gt=0,
        description="Only samples of the last this many seconds are fitted and averaged (§2, monitoring period).",
    )
    bottleneck_interval_s: float = Field(
        10.0,
        gt=0,
        description="Length of one bottleneck interval; T_bottleneck is the largest effective value within it "
        "(§2.2 step 5).",
    )
    bottleneck_value: BottleneckValueSource = Field(
        "fitted",
        description="An effective bottleneck value is f(t_i), the line at a point above it, as §2.2 step 5 says "
        "('fitted'), or that point's measured latency gamma_i ('observed').",
    )
    min_recurrences: int = Field(
        2,
        ge=1,
        description="An interval's T_bottleneck counts only when the interval holds at least this many effective "
        "values "
        "(§2.2 step 6, 'appears several times in the same interval').",
    )
    order_of_magnitude_factor: float = Field(
        10.0,
        gt=1,
        description="T_bottleneck is 'of the order of T' (Eq. 5) when T / factor <= T_bottleneck <= T * factor.",
    )
    phi: float = Field(1.0, gt=0, description="Eq. 9's allocation coefficient phi (the paper's default is 1).")
    planning_policy: PlanningPolicyName = Field(
        "parameter_plan", description="Plan generation policy (§2.3): 'parameter_plan' is Eq. 9."
    )
    min_channels: int = Field(1, ge=1, description="A plan or pre-scale never gives a stage fewer channels than this.")
    max_channels: int = Field(
        MAX_CHANNELS,
        ge=1,
        le=MAX_CHANNELS,
        description="A plan or pre-scale never gives a stage more channels than this.",
    )
    unknown_selectivity: float = Field(
        1.0,
        ge=0,
        description="Selectivity assumed for a stage that received no rows in the whole period (pass-through: "
        "the cautious guess for pre-scaling what lies downstream).",
    )
    target_utilization: float = Field(
        0.7,
        gt=0,
        le=1,
        description="Pre-scaling sizes a stage so that its predicted input uses at most this share of its "
        "channels' capacity.",
    )

    @model_validator(mode="after")
    def _check_bounds(self) -> AsStreamOptions:
        if self.min_channels > self.max_channels:
            raise ValueError(f"min_channels {self.min_channels} > max_channels {self.max_channels}")
        return self

    def clamp_channels(self, channels: int) -> int:
        """`channels` within [min_channels, max_channels]."""
        return max(self.min_channels, min(self.max_channels, channels))


StagesPolicyName = Literal["as-stream", "reactive", "together"]


class StagesOptions(BaseModel):
    """How the multi-stage loop (`elasticity.control.asstream.loop`) decides per stage."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: StagesPolicyName = Field(
        "as-stream",
        description="'as-stream': bottleneck ranking (Eq. 6-8) sized by Eq. 9 plus predictive pre-scaling of "
        "downstream stages (Eq. 10-11); 'reactive': the busiest stage, sized from its measured busy share, no "
        "prediction; 'together': the single-stage controller's count for every stage.",
    )
    asstream: AsStreamOptions = Field(
        default_factory=AsStreamOptions, description="As-Stream's thresholds (monitoring period, phi, bounds)."
    )
    executors: int = Field(1, ge=1, description="N_executer of Eq. 9: executors a stage's channels run on.")
    scale_in_utilization: float = Field(
        0.35,
        gt=0,
        lt=1,
        description="A stage shrinks only when its (predicted or measured) input uses less than this share of its "
        "channels' capacity; it then shrinks to asstream.target_utilization.",
    )
    cooldown_s: float = Field(
        10.0, ge=0, description="No decision for any stage until this long after a rescale was realized."
    )
    arrival_window_s: float = Field(
        2.0,
        ge=0,
        description="The source's offered workload (Eq. 10's D_in of the first stage) is the Kafka arrival of the "
        "last this many seconds, by record timestamp, when above the sampling period's (0: the period's only).",
    )
