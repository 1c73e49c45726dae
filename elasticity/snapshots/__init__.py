"""When a channel snapshots its state: seed 003's recovery-time model and adaptive checkpoints.

Pure Python (pydantic). The stream reports a `BatchObservation` per committed batch per channel
and asks its `SnapshotPolicy` — `FixedPeriodPolicy` (every N batches or T seconds, esp's old
behaviour) or `AdaptivePolicy` (recov-guarantee + peak avoidance) — whether to snapshot now.
"""

from elasticity.snapshots.adaptive import AdaptiveOptions, AdaptivePolicy, AdaptiveState, CoverageSample
from elasticity.snapshots.policy import (
    FixedPeriodOptions,
    FixedPeriodPolicy,
    FixedPeriodState,
    SnapshotDecision,
    SnapshotPolicy,
    SnapshotRule,
)
from elasticity.snapshots.recovery import (
    Backlog,
    BatchObservation,
    FixedCost,
    LearnedRates,
    RateEstimate,
    RecoveryOptions,
    RecoveryPrediction,
    RecoveryRates,
    RecoveryTracker,
    RestoreObservation,
    backlog_in_history,
)

__all__ = [
    "AdaptiveOptions",
    "AdaptivePolicy",
    "AdaptiveState",
    "Backlog",
    "BatchObservation",
    "CoverageSample",
    "FixedCost",
    "FixedPeriodOptions",
    "FixedPeriodPolicy",
    "FixedPeriodState",
    "LearnedRates",
    "RateEstimate",
    "RecoveryOptions",
    "RecoveryPrediction",
    "RecoveryRates",
    "RecoveryTracker",
    "RestoreObservation",
    "SnapshotDecision",
    "SnapshotPolicy",
    "SnapshotRule",
    "backlog_in_history",
]
