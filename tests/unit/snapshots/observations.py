"""Builders of the snapshot tests: batch observations and a policy run over a series."""

from __future__ import annotations

from collections.abc import Sequence

from elasticity.snapshots import BatchObservation, SnapshotDecision, SnapshotPolicy


def batch(
    batch_id: int,
    time_s: float,
    records: int = 0,
    entries: int = 0,
    state_bytes: int = 0,
    fold_s: float | None = None,
    process_s: float | None = None,
) -> BatchObservation:
    return BatchObservation(
        batch_id=batch_id,
        time_s=time_s,
        records=records,
        changelog_entries=entries,
        changelog_bytes=entries * 40,
        state_bytes=state_bytes,
        fold_s=fold_s,
        process_s=process_s,
    )


def run(
    policy: SnapshotPolicy, records: Sequence[int], every_s: float = 1.0, entries: int = 0
) -> list[SnapshotDecision]:
    """One batch per `every_s` seconds from t = 0, with the given coverage series."""
    return [policy.decide(batch(i, i * every_s, records=r, entries=entries)) for i, r in enumerate(records)]


def taken_at(decisions: Sequence[SnapshotDecision]) -> list[int]:
    return [d.batch_id for d in decisions if d.take]
