"""`LoadSpec`: the typed description of one synthetic load (rate profile, keys, records, producers).

Every field has a default and a one-line description, so the CLI, benchmarks and tests can all
build a spec from a few overrides. The spec is pure data: nothing here talks to Kafka.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ProfileName = Literal["constant", "step", "square", "sine", "esault"]
DistributionName = Literal["uniform", "zipf"]
RecordKind = Literal["words", "ads"]
KeyMode = Literal["none", "id", "natural"]

# The lowest rate of each profile as a share of the peak, when `base_rate` is not given.
DEFAULT_BASE_SHARE: dict[str, float] = {"constant": 1.0, "step": 0.2, "square": 0.2, "sine": 0.1, "esault": 0.05}


class LoadSpec(BaseModel):
    """One load: what records, at what rate over time, to which topic, from how many producers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- rate profile
    profile: ProfileName = Field("constant", description="Rate shape: constant, step, square, sine or esault.")
    peak_rate: float = Field(1000.0, gt=0, description="Highest target rate of the profile, records/s (all processes).")
    base_rate: float | None = Field(
        None, ge=0, description="Lowest rate of the profile; default a profile-specific share of the peak."
    )
    duration_s: float | None = Field(
        None, gt=0, description="Wall-clock length of the run; default the profile's own length."
    )
    speed: float = Field(1.0, gt=0, description="Time compression: 2.0 plays the profile twice as fast (same rates).")
    period_s: float = Field(120.0, gt=0, description="Period of the square and sine profiles, in profile time.")
    step_at_s: float = Field(30.0, gt=0, description="When the step profile jumps from base to peak, in profile time.")
    esault_cycles: int = Field(2, ge=1, description="Rise-hold-fall-hold cycles of the eSault profile.")
    esault_warmup_s: float = Field(20.0, gt=0, description="Time at the base rate before the first eSault rise.")
    # -- keys and records
    kind: RecordKind = Field(
        "words", description="words: text lines of words; ads: Yahoo-benchmark-like JSON ad events."
    )
    topic: str = Field("words", min_length=1, description="Kafka topic the records go to (must exist).")
    distribution: DistributionName = Field("uniform", description="How words (or ads) are drawn: uniform or zipf.")
    zipf_s: float = Field(1.1, gt=0, description="Zipf exponent s: P(rank k) ~ 1/k^s over the vocabulary.")
    vocabulary: int = Field(10_000, ge=1, le=10_000_000, description="Number V of distinct words.")
    words_per_line: int = Field(8, ge=1, le=10_000, description="Words W in each word-count line.")
    key: KeyMode = Field(
        "none", description="Record key: none, id (line/event id) or natural (first word / campaign id)."
    )
    campaigns: int = Field(100, ge=1, description="Ad campaigns (ads kind).")
    ads_per_campaign: int = Field(
        10, ge=1, description="Ads per campaign; ad -> campaign is fixed by the seed (ads kind)."
    )
    late_fraction: float = Field(
        0.0, ge=0, le=1, description="Share of ad events whose event_time lies in the past (ads kind)."
    )
    late_by_s: float = Field(60.0, ge=0, description="How far in the past late events are, seconds (ads kind).")
    seed: int = Field(0, ge=0, description="Seed of every random draw; same spec and seed -> same records.")
    # -- producers
    processes: int = Field(
        1, ge=0, le=64, description="Producer processes sharing the rate; 0 = as many as the peak needs."
    )
    process_capacity_rps: float = Field(
        15_000.0, gt=0, description="Records/s one producer process sustains (used when processes=0)."
    )
    slice_ms: int = Field(50, ge=5, le=1000, description="Pacing slice: records due are sent every slice_ms.")
    max_backlog_s: float = Field(
        1.0, ge=0, description="Deficit (in seconds of target rate) a slow producer may catch up; beyond it is dropped."
    )
    block_records: int = Field(1000, ge=1, description="Records generated per deterministic block (content unit).")
    linger_ms: int = Field(20, ge=0, description="Kafka producer linger.ms: how long a batch waits to fill.")
    batch_bytes: int = Field(1_048_576, ge=1024, description="Kafka producer batch.size in bytes.")
    acks: Literal["0", "1", "all"] = Field("1", description="Kafka producer acks.")

    @model_validator(mode="after")
    def _rates_are_ordered(self) -> LoadSpec:
        if self.base_rate is not None and self.base_rate > self.peak_rate:
            raise ValueError(f"base_rate {self.base_rate} is above peak_rate {self.peak_rate}")
        return self

    @property
    def effective_base_rate(self) -> float:
        """The lowest rate of the profile, records/s."""
        if self.base_rate is not None:
            return self.base_rate
        return self.peak_rate * DEFAULT_BASE_SHARE[self.profile]

    @property
    def ads(self) -> int:
        """Number of distinct ads (ads kind)."""
        return self.campaigns * self.ads_per_campaign

    @property
    def key_space(self) -> int:
        """Number of items the key distribution draws from: words, or ads."""
        return self.vocabulary if self.kind == "words" else self.ads

    def producer_processes(self) -> int:
        """How many producer processes to start: as asked, or enough for the peak when processes=0."""
        if self.processes > 0:
            return self.processes
        return max(1, math.ceil(self.peak_rate / self.process_capacity_rps))
