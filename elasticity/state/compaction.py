"""Write a channel's snapshot from its durable history alone, away from its working set.

A snapshot at version v is the fold of the newest older snapshot and every changelog up to v:
exactly what a restore reads back, so a snapshot written this way is the channel's state at v
whichever process writes it. The stream's driver writes them (`pipelines.streams.snapshots`)
while the executors run the next batch: the batch never waits for a snapshot, and the working
sets (RocksDB in the executors' Python workers) are not touched.

Safe against the writers it runs beside:
- the executors only append changelogs after v, and a snapshot never reads past v;
- a migration appends records too, but may drop a channel's whole history: the caller holds
  the migrations off while it writes (the driver's history lock);
- v must be a changelog that exists: a channel dropped and created again has other versions,
  so an old decision never writes into the new channel's history;
- the file appears atomically (`Location.publish_parquet`), so a crash leaves the old history;
- pruning keeps `keep_snapshots` snapshots and only the changelogs the older one covers: a
  working copy that lags behind and finds a changelog gone rebuilds from the newest snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from elasticity.state.durable import fold_entries
from elasticity.state.history import History, prune
from elasticity.state.records import Version


@dataclass(frozen=True)
class SnapshotWritten:
    """One snapshot written from history."""

    version: Version
    entries: int
    bytes: int
    """In-memory (Arrow) size of the state written: the unit a restore is measured in."""
    changelogs_folded: int
    seconds: float


def batch_version(history: History, batch_id: int) -> Version | None:
    """The version batch `batch_id` committed in this history (None: it wrote none here).

    A batch's changelog carries the migration epoch the channel was at; a migration after the
    batch writes (batch, a later epoch): the batch's own version is the smallest of that batch."""
    versions = [v for v in history.changelog_versions() if v.batch == batch_id]
    return min(versions) if versions else None


def snapshot_from_history(
    history: History,
    version: Version,
    keep_snapshots: int | None = 2,
    before_publish: Callable[[], None] | None = None,
) -> SnapshotWritten | None:
    """Write the snapshot at `version` (None if pointless: a snapshot at or after it exists, or
    `version` is not one of this history's changelogs). `before_publish` runs just before the
    file is published (the driver's fence check: a deposed driver writes nothing)."""
    started = time.perf_counter()
    snapshots = history.snapshot_versions()
    if snapshots and max(snapshots) >= version:
        return None
    changelogs = sorted(history.changelog_versions())
    if version not in changelogs:
        return None
    older = [s for s in snapshots if s < version]
    base = max(older) if older else None
    parts = [history.read_snapshot(base)] if base is not None else []
    folded = [v for v in changelogs if (base is None or v > base) and v <= version]
    parts += [history.read_changelog(v) for v in folded]
    entries = fold_entries(parts)
    if before_publish is not None:
        before_publish()
    history.write_snapshot(version, entries)
    if keep_snapshots is not None:
        prune(history, keep_snapshots)
    return SnapshotWritten(
        version=version,
        entries=entries.num_rows,
        bytes=entries.nbytes,
        changelogs_folded=len(folded),
        seconds=time.perf_counter() - started,
    )
