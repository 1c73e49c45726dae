"""One stream's snapshot decisions: a policy per channel, chosen by `SnapshotOptions`.

The stream's driver reports each committed batch as one `BatchObservation` per channel; the
planner keeps one `SnapshotPolicy` per channel (adaptive by default, a fixed period for
comparison), starts a new channel's policy from the backlog its history already holds and from
the rates learned before (`LearnedRates`, which the caller keeps across driver restarts), and
forgets channels a rescale removed. Pure: the caller writes the snapshots it is told to take.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from elasticity.snapshots.adaptive import AdaptiveOptions, AdaptivePolicy, AdaptiveState
from elasticity.snapshots.policy import (
    FixedPeriodOptions,
    FixedPeriodPolicy,
    FixedPeriodState,
    SnapshotDecision,
    SnapshotPolicy,
)
from elasticity.snapshots.recovery import (
    Backlog,
    BatchObservation,
    LearnedRates,
    RecoveryRates,
    RecoveryTracker,
    RestoreObservation,
)


def _default_fixed() -> FixedPeriodOptions:
    return FixedPeriodOptions(every_batches=25)


class SnapshotOptions(BaseModel):
    """When channels snapshot their state: the policy and its knobs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: Literal["adaptive", "fixed"] = Field(
        "adaptive",
        description="adaptive: seed 003's recovery bound and peak avoidance; fixed: a fixed period (for comparison).",
    )
    adaptive: AdaptiveOptions = Field(
        default_factory=AdaptiveOptions, description="The adaptive policy's bound, period and recovery model."
    )
    fixed: FixedPeriodOptions = Field(
        default_factory=_default_fixed, description="The fixed period (every N batches or T seconds)."
    )
    keep_snapshots: int = Field(2, ge=1, description="Snapshots kept per channel (older history is pruned).")

    @classmethod
    def choose(
        cls,
        policy: Literal["adaptive", "fixed"] = "adaptive",
        max_recovery_s: float | None = None,
        period_s: float | None = None,
    ) -> SnapshotOptions:
        """The options a command line or run config names; None keeps a default.

        `period_s` is the adaptive policy's checkpoint period, or the fixed policy's period in
        seconds (without it the fixed policy keeps every 25 batches)."""
        if policy == "fixed":
            if max_recovery_s is not None:
                raise ValueError("max_recovery_s bounds the adaptive policy; the fixed one ignores it")
            if period_s is None:
                return cls(policy="fixed")
            return cls(policy="fixed", fixed=FixedPeriodOptions(every_s=period_s))
        knobs = {"max_recovery_s": max_recovery_s, "period_s": period_s}
        return cls(adaptive=AdaptiveOptions(**{k: v for k, v in knobs.items() if v is not None}))

    def new_policy(self, backlog: Backlog, rates: RecoveryRates | None = None) -> SnapshotPolicy:
        """A channel's policy, starting from the backlog its durable history holds and from
        `rates` learned earlier (the priors without them)."""
        if self.policy == "adaptive":
            tracker = RecoveryTracker.start(self.adaptive.recovery, backlog, rates)
            return AdaptivePolicy(self.adaptive, AdaptiveState(tracker=tracker))
        tracker = RecoveryTracker.start(self.fixed.recovery, backlog, rates)
        return FixedPeriodPolicy(self.fixed, FixedPeriodState(tracker=tracker))


class SnapshotPlanner:
    """A `SnapshotPolicy` per channel of one stream."""

    def __init__(
        self, options: SnapshotOptions, backlog_of: Callable[[int], Backlog], learned: LearnedRates | None = None
    ) -> None:
        self.options = options
        self._backlog_of = backlog_of
        self._earlier = learned or LearnedRates()
        self._policies: dict[int, SnapshotPolicy] = {}
        self._newest_taken: dict[int, int] = {}
        """Per channel, the batch of the newest snapshot decided."""

    def _policy(self, channel: int) -> SnapshotPolicy:
        policy = self._policies.get(channel)
        if policy is None:
            rates = self.learned().for_channel(channel)
            policy = self._policies[channel] = self.options.new_policy(self._backlog_of(channel), rates)
        return policy

    def learned(self) -> LearnedRates:
        """The rates to keep across a driver restart: the live channels' own, else the earlier ones."""
        live = {channel: policy.rates for channel, policy in self._policies.items()}
        return LearnedRates(channels=live or dict(self._earlier.channels))

    def observe_restore(self, channel: int, restore: RestoreObservation) -> None:
        self._policy(channel).observe_restore(restore)

    def observe_written(self, channel: int, batch_id: int, snapshot_bytes: int) -> None:
        """A snapshot decided at `batch_id` was written at `snapshot_bytes`. The policy counted it at
        the state's estimated size; when it is still the channel's newest, its measured size takes
        over, so that a better estimate of an entry's bytes does not read as a smaller restore."""
        if self._newest_taken.get(channel) == batch_id and channel in self._policies:
            self._policies[channel].observe_snapshot_size(snapshot_bytes)

    def decide(self, batches: Mapping[int, BatchObservation]) -> dict[int, SnapshotDecision]:
        """Each channel's decision after one committed batch."""
        decisions = {channel: self._policy(channel).decide(batch) for channel, batch in sorted(batches.items())}
        for channel, decision in decisions.items():
            if decision.take:
                self._newest_taken[channel] = decision.batch_id
        return decisions

    def keep_only(self, channels: Iterable[int]) -> None:
        """Forget channels a rescale removed (one created again later starts afresh)."""
        live = set(channels)
        for channel in [c for c in self._policies if c not in live]:
            del self._policies[channel]
            self._newest_taken.pop(channel, None)

    def channels(self) -> list[int]:
        return sorted(self._policies)
