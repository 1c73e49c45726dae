"""The elasticity policy of one stream: SLO, sampling and controller options, each with a default.

A micro-batch stream is not the actor system eSault was tuned for: a batch costs seconds of
fixed work, so probe latency idles at a few seconds and Kafka lag is a sawtooth of one batch of
input. `ElasticityPolicy.control_options()` turns the few numbers a person chooses (the latency
SLO, the sampling period = sensor interval, the channel bounds) into the detector and controller
options that fit that shape. A stream may override its policy at run time with a JSON file
`<stream root>/control/elasticity-policy.json` (read at every sensor evaluation, never at
import); the code location's defaults apply otherwise.
"""

from __future__ import annotations

import json
from os import PathLike, fspath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from elasticity.control import (
    CongestionOptions,
    ControllerOptions,
    ControlOptions,
    OverloadOptions,
    UnderloadOptions,
)
from elasticity.control.asstream import StagesOptions
from elasticity.layout import MAX_CHANNELS
from elasticity.state import Location, uris
from orchestration.names import RESIZE_MAX_WAIT_S

POLICY_FILE = "elasticity-policy.json"


class PolicyFileError(ValueError):
    """A stream's policy override file that cannot be used; the message names it and the problem."""


class ElasticityPolicy(BaseModel):
    """What the elasticity sensor of one stream aims for and how it samples."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    slo_s: float = Field(10.0, gt=0, description="Latency SLO: p99 probe latency per channel (MAX_LATENCY of eSault).")
    sample_period_s: float = Field(
        10.0, gt=0, description="Sampling period = sensor interval; detector windows count these periods."
    )
    probe_timeout_s: float = Field(
        30.0, gt=0, description="A channel whose probes have not come back for this long counts as timed out."
    )
    min_channels: int = Field(1, ge=1, description="Never fewer channels than this.")
    max_channels: int = Field(
        8, ge=1, le=MAX_CHANNELS, description="Never more channels (keep <= the Spark task slots of the stream)."
    )
    cooldown_s: float | None = Field(
        None, ge=0, description="No decision this long after a rescale decision (None: one sample period)."
    )
    split_merge: bool = Field(True, description="Allow targeted split/merge of one channel (off: levels only).")
    auto_rescale: bool = Field(
        True, description="Request rescale runs (off: the sensor still decides and explains, but runs nothing)."
    )
    metrics_limit: int = Field(120, ge=4, description="Metrics records (one per batch) read per evaluation.")
    arrival_window_s: float = Field(
        2.5,
        ge=0,
        description="Also read the input that arrived in the last this many seconds, to tell whether a new "
        "layout is already outrun by the input of now (0: the sampling period's input only).",
    )
    rescale_timeout_s: float = Field(
        300.0, gt=0, le=RESIZE_MAX_WAIT_S, description="How long a rescale run waits for the stream to apply it."
    )
    scale_out_utilization: float = Field(
        0.9, gt=0, le=1, description="A scale-out sizes for this share of the measured per-channel capacity (P6)."
    )
    scale_in_utilization: float = Field(
        0.8, gt=0, le=1, description="A scale-in goes only to a count that runs at most this share of capacity (P2)."
    )
    control: ControlOptions | None = Field(
        None, description="Full detector/controller options; None: derived from the fields above (control_options())."
    )
    stages: StagesOptions = Field(
        default_factory=StagesOptions,
        description="How a job with several elastic stages is controlled per stage (As-Stream by default); "
        "its channel bounds are this policy's min_channels and max_channels.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> ElasticityPolicy:
        if self.min_channels > self.max_channels:
            raise ValueError(f"min_channels {self.min_channels} > max_channels {self.max_channels}")
        if self.scale_in_utilization > self.scale_out_utilization:
            raise ValueError(
                f"scale_in_utilization {self.scale_in_utilization} > scale_out_utilization "
                f"{self.scale_out_utilization}: no band between them, a scale-in would be answered by a scale-out"
            )
        return self

    def stage_options(self) -> StagesOptions:
        """The multi-stage loop's options, bounded by this policy's channel bounds (one source for them)."""
        bounds = {"min_channels": self.min_channels, "max_channels": self.max_channels}
        return self.stages.model_copy(update={"asstream": self.stages.asstream.model_copy(update=bounds)})

    def control_options(self) -> ControlOptions:
        """The loop's options for a micro-batch stream (see the module docstring for why)."""
        if self.control is not None:
            return self.control
        return ControlOptions(
            overload=OverloadOptions(
                max_latency_s=self.slo_s,
                reaction_time=3,
                reaction_factor=0.5,
            ),
            # Scale-in is never urgent: a longer window than overload, as in eSault.
            underload=UnderloadOptions(reaction_time=4, reaction_factor=0.6, low_watermark=0.6),
            congestion=CongestionOptions(
                window=3,
                # Lag is a sawtooth of about one batch of input, and a batch costs seconds of fixed
                # work even when idle: only growth beyond a few seconds of input per period is a
                # trend, and only a lag of two SLOs is congestion by itself (the SLO itself is
                # watched per channel by the probes).
                growth_tolerance_s=max(2.0, self.slo_s / 4),
                max_lag_s=2 * self.slo_s,
                # A lag the stage needs longer than the SLO to work off breaks the SLO for every
                # record behind it, whatever the input rate does meanwhile.
                max_drain_s=self.slo_s,
                threshold=0.6,
            ),
            controller=ControllerOptions(
                min_channels=self.min_channels,
                max_channels=self.max_channels,
                # The new layout's windows must refill anyway; the cooldown only has to cover the
                # rescale run itself (it starts a few seconds after the decision).
                cooldown_s=self.sample_period_s if self.cooldown_s is None else self.cooldown_s,
                # A rescale run gives up after rescale_timeout_s: until then a rescale not yet visible
                # in the metrics is still in flight, not failed.
                rescale_timeout_s=self.rescale_timeout_s,
                scale_out_utilization=self.scale_out_utilization,
                scale_in_utilization=self.scale_in_utilization,
                # The band between the two targets is where a backlog drains: channels beyond what P2
                # keeps at the same input would be scaled back in once it has, a reversal in a steady phase.
                drain_within_band=True,
                # The input rate per period comes from the broker's offsets, exact: two periods tell a
                # lasting fall from one quiet period. The whole window (four) made a fall in steps
                # (eSault's, 16 s each) shrink the stage a step late each time.
                scale_in_input_periods=2,
                # A rescale lands at a batch boundary and each one-level step costs a batch of
                # growing backlog: size the first scale-out by the channels' busy-time rate (half
                # busy or more, so a batch's fixed costs do not dominate it) before any period is
                # saturated.
                busy_rate_min_share=0.5,
                enable_split_merge=self.split_merge,
            ),
        )


def policy_path(control_dir: str | PathLike[str]) -> str:
    """The override file's path or URI (for messages: read and write it with the functions below)."""
    return uris.join(control_dir, POLICY_FILE)


def _policy_bytes(control_dir: str | PathLike[str]) -> bytes | None:
    return Location.of(fspath(control_dir)).read_document(POLICY_FILE)


def load_policy(control_dir: str | PathLike[str], default: ElasticityPolicy) -> ElasticityPolicy:
    """The stream's policy: `default` with the fields of its override file (if any) on top;
    PolicyFileError naming the file and the problem when it is not a valid override."""
    path = policy_path(control_dir)
    if (stored := _policy_bytes(control_dir)) is None:
        return default
    try:
        overrides: Any = json.loads(stored)
    except (ValueError, UnicodeDecodeError) as error:
        raise PolicyFileError(f"policy override {path} is not JSON ({error}); fix or remove it") from error
    if not isinstance(overrides, dict):
        raise PolicyFileError(f"policy override {path} must hold a JSON object of policy fields; fix or remove it")
    return _validated(default, overrides, f"policy override {path}", "; fix or remove it")


def _validated(default: ElasticityPolicy, overrides: dict[str, Any], what: str, advice: str) -> ElasticityPolicy:
    try:
        return ElasticityPolicy.model_validate({**default.model_dump(exclude={"control"}), **overrides})
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'policy'}: {e['msg']}" for e in error.errors())
        raise PolicyFileError(f"{what} is invalid: {problems}{advice}") from error


def read_overrides(control_dir: str | PathLike[str]) -> dict[str, Any]:
    """The fields a stream's override file sets ({} when there is none or it is not a JSON object)."""
    try:
        overrides = json.loads(stored) if (stored := _policy_bytes(control_dir)) is not None else {}
    except (ValueError, UnicodeDecodeError):
        return {}
    return overrides if isinstance(overrides, dict) else {}


def change_policy(
    control_dir: str | PathLike[str], changes: dict[str, Any], default: ElasticityPolicy, reset: bool = False
) -> tuple[ElasticityPolicy, dict[str, Any]]:
    """Apply `changes` on top of the stream's override file (or on the defaults when `reset`) and
    store the result atomically; returns the effective policy and the stored overrides.
    PolicyFileError (nothing stored) when the result is not a valid policy."""
    overrides = {**({} if reset else read_overrides(control_dir)), **changes}
    policy = _validated(default, overrides, "the policy change", "; nothing changed")
    # Atomic, without a checksum: a sensor tick never reads half a file, and people edit it by hand.
    Location.of(fspath(control_dir)).publish_bytes(POLICY_FILE, json.dumps(overrides, indent=2).encode(), sealed=False)
    return policy, overrides


def write_policy(control_dir: str | PathLike[str], policy: ElasticityPolicy) -> str:
    """Store a stream's whole policy as its override (tests, the benchmark, an operator)."""
    document = policy.model_dump_json(exclude_none=True, indent=2).encode()
    Location.of(fspath(control_dir)).publish_bytes(POLICY_FILE, document, sealed=False)
    return policy_path(control_dir)
