"""When does a channel snapshot its state? The policy interface, and the fixed period it replaces.

Seed 003 compares its adaptive checkpoints with fixed periods (9 s and 14 s, §4.2); esp today
snapshots every 25 batches. Both are a `SnapshotPolicy`: the stream calls `decide(batch)` once per
committed micro-batch per channel and snapshots when the decision says `take` (the policy
assumes it does: its backlog restarts from that snapshot). Every decision carries the rule that
decided, a sentence a person can read, the numbers it used and the predicted recovery time after
it, so a fixed period reports what it would cost to recover just as the adaptive policy does.

`FixedPeriodPolicy` snapshots every N batches (`(batch_id + 1) % N == 0`, today's rule, stable
across restarts) or every T seconds since its previous snapshot.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from elasticity.snapshots.recovery import (
    Backlog,
    BatchObservation,
    RecoveryOptions,
    RecoveryPrediction,
    RecoveryRates,
    RecoveryTracker,
    RestoreObservation,
)

SnapshotRule = Literal[
    "fixed_period",  # fixed: the period is due
    "not_due",  # fixed: the period is not due
    "recovery",  # adaptive: recov-guarantee, the bound would be passed before the next chance
    "max_interval",  # adaptive: the hard cap on time between snapshots
    "period_done",  # adaptive: this period's snapshot is taken
    "small_gain",  # adaptive: a snapshot would shorten the recovery too little for its cost
    "peak",  # adaptive: coverage above its baseline, deferred
    "falling",  # adaptive: selection phase, coverage still falling
    "trough",  # adaptive: selection phase, ICR turned non-negative after falling
    "low",  # adaptive: selection phase, coverage at or below baseline and not falling
    "period_end",  # adaptive: the period ended while coverage was still falling
]


class SnapshotDecision(BaseModel):
    """One channel's decision after one batch; `take` means: snapshot now, at this batch's version."""

    model_config = ConfigDict(frozen=True)

    batch_id: int = Field(description="The committed batch the decision follows.")
    time_s: float = Field(description="Clock time of that commit.")
    take: bool = Field(description="Snapshot now.")
    rule: SnapshotRule = Field(description="The rule that decided.")
    reason: str = Field(description="One sentence: the numbers and the rule.")
    recovery: RecoveryPrediction = Field(description="Predicted recovery time after this decision.")
    signals: dict[str, float] = Field(default_factory=dict, description="The numbers the rule used.")


class SnapshotPolicy(Protocol):
    """Decides, once per committed batch of one channel, whether to snapshot now."""

    def decide(self, batch: BatchObservation) -> SnapshotDecision: ...

    def observe_restore(self, restore: RestoreObservation) -> None: ...

    def observe_snapshot_size(self, snapshot_bytes: int) -> None:
        """The newest snapshot this policy took was written at `snapshot_bytes`."""
        ...

    @property
    def rates(self) -> RecoveryRates:
        """The recovery model's rates learned so far (kept across driver restarts)."""
        ...


def recovery_after(
    tracker: RecoveryTracker, batch: BatchObservation, take: bool, options: RecoveryOptions
) -> RecoveryPrediction:
    """Predicted recovery once the decision is carried out; the next batch is assumed like this one."""
    backlog = Backlog(snapshot_bytes=batch.state_bytes) if take else tracker.backlog
    return tracker.predict(batch.records, options, backlog)


class FixedPeriodOptions(BaseModel):
    """A fixed snapshot period, in batches or in seconds (exactly one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    every_batches: int | None = Field(None, ge=1, description="Snapshot after every N-th batch (batch id + 1 ≡ 0).")
    every_s: float | None = Field(None, gt=0, description="Snapshot once this long has passed since the previous one.")
    recovery: RecoveryOptions = Field(default_factory=RecoveryOptions, description="The recovery-time model.")

    @model_validator(mode="after")
    def _one_period(self) -> FixedPeriodOptions:
        if (self.every_batches is None) == (self.every_s is None):
            raise ValueError("set exactly one of every_batches and every_s")
        return self


class FixedPeriodState(BaseModel):
    """What a fixed period remembers; JSON round-trips."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tracker: RecoveryTracker
    last_snapshot_s: float | None = Field(None, description="Clock time of the previous snapshot (or of the start).")


class FixedPeriodPolicy:
    """Today's behaviour, kept for comparison: snapshot on a fixed cadence, whatever the load."""

    def __init__(self, options: FixedPeriodOptions, state: FixedPeriodState | None = None) -> None:
        self.options = options
        self.state = state or FixedPeriodState(tracker=RecoveryTracker.start(options.recovery))

    @property
    def rates(self) -> RecoveryRates:
        return self.state.tracker.rates

    def observe_restore(self, restore: RestoreObservation) -> None:
        tracker = self.state.tracker.after_restore(restore, self.options.recovery)
        self.state = self.state.model_copy(update={"tracker": tracker})

    def observe_snapshot_size(self, snapshot_bytes: int) -> None:
        self.state = self.state.model_copy(update={"tracker": self.state.tracker.with_snapshot_bytes(snapshot_bytes)})

    def decide(self, batch: BatchObservation) -> SnapshotDecision:
        tracker = self.state.tracker.after_batch(batch, self.options.recovery)
        since = self.state.last_snapshot_s if self.state.last_snapshot_s is not None else batch.time_s
        if self.options.every_batches is not None:
            every = self.options.every_batches
            take = (batch.batch_id + 1) % every == 0
            period = f"every {every} batches"
        else:
            every_s = self.options.every_s or 0.0
            take = batch.time_s - since >= every_s
            period = f"every {every_s:g} s ({batch.time_s - since:.1f} s since the last)"
        recovery = recovery_after(tracker, batch, take, self.options.recovery)
        self.state = FixedPeriodState(
            tracker=tracker.after_snapshot(batch.state_bytes) if take else tracker,
            last_snapshot_s=batch.time_s if take else since,
        )
        return SnapshotDecision(
            batch_id=batch.batch_id,
            time_s=batch.time_s,
            take=take,
            rule="fixed_period" if take else "not_due",
            reason=f"{'due' if take else 'not due'}: {period}",
            recovery=recovery,
        )
