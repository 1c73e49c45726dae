"""Write a channel's snapshot from its durable history alone, away from its working set.

A snapshot at version v is the fold of the newest older snapshot and every changelog up to v:
exactly what a restore reads back, so a snapshot written this way is the channel's state at v
whichever process writes it. The stream's driver writes them (`pipelines.streams.snapshots`)
while the executors run the next batch: the batch never waits for a snapshot, and the working
sets (RocksDB in the executors' Python workers) are not touched.

Two halves, so that a migration never waits for a whole snapshot: `fold_snapshot` reads, folds
and encodes (the costly part, seconds for millions of entries) and changes nothing a reader
sees; `publish_snapshot` makes the file appear and prunes (a fraction of a second).

Safe against the writers it runs beside:
- the executors only append changelogs after v, and a snapshot never reads past v;
- a migration appends records too, and only at versions after v (its rollback removes only
  those), but may drop a channel's whole history: the caller holds migrations off while it
  publishes and prunes (the driver's history lock), and the publish checks again that v is
  still a changelog of the channel and that no snapshot at or after v appeared meanwhile;
- v must be a changelog that exists: a channel dropped and created again has other versions,
  so an old decision never writes into the new channel's history;
- the file appears atomically (`Location.publish_bytes`), so a crash leaves the old history;
- pruning keeps `keep_snapshots` snapshots and only the changelogs the older one covers: a
  working copy that lags behind and finds a changelog gone rebuilds from the newest snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from elasticity.state.durable import fold_entries
from elasticity.state.history import History, StagedSnapshot, prune
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


@dataclass(frozen=True)
class FoldedSnapshot:
    """A snapshot read, folded and encoded from history, not yet published."""

    version: Version
    staged: StagedSnapshot
    entries: int
    bytes: int
    changelogs_folded: int
    started: float
    """`time.perf_counter()` when the fold began: a written snapshot's time counts from it."""


def fold_snapshot(
    history: History, version: Version, between_steps: Callable[[], None] | None = None
) -> FoldedSnapshot | None:
    """The snapshot at `version`, ready to publish (None if pointless: a snapshot at or after it
    exists, or `version` is not one of this history's changelogs). Nothing visible changes.
    `between_steps` runs before each file read, the fold and the encoding (the driver's writer
    waits there while a migration runs, so that it does not take the migration's cores)."""
    started = time.perf_counter()
    if not _worth_writing(history, version):
        return None
    step = between_steps or (lambda: None)
    older = [s for s in history.snapshot_versions() if s < version]
    base = max(older) if older else None
    folded = [v for v in sorted(history.changelog_versions()) if (base is None or v > base) and v <= version]
    parts = []
    if base is not None:
        step()
        parts.append(history.read_snapshot(base))
    for changelog in folded:
        step()
        parts.append(history.read_changelog(changelog))
    step()
    entries = fold_entries(parts)
    step()
    staged = history.stage_snapshot(version, entries)
    return FoldedSnapshot(version, staged, entries.num_rows, entries.nbytes, len(folded), started)


def publish_snapshot(
    history: History,
    folded: FoldedSnapshot,
    keep_snapshots: int | None = 2,
    before_publish: Callable[[], None] | None = None,
) -> SnapshotWritten | None:
    """Publish `folded` and prune (None, and nothing written, if the history moved past it since
    the fold: its channel dropped, or a snapshot at or after its version appeared).
    `before_publish` runs just before the file is published (the driver's fence check: a
    deposed driver writes nothing)."""
    if not _worth_writing(history, folded.version):
        return None
    if before_publish is not None:
        before_publish()
    folded.staged.publish()
    if keep_snapshots is not None:
        prune(history, keep_snapshots)
    return SnapshotWritten(
        version=folded.version,
        entries=folded.entries,
        bytes=folded.bytes,
        changelogs_folded=folded.changelogs_folded,
        seconds=time.perf_counter() - folded.started,
    )


def snapshot_from_history(
    history: History,
    version: Version,
    keep_snapshots: int | None = 2,
    before_publish: Callable[[], None] | None = None,
) -> SnapshotWritten | None:
    """Fold and publish the snapshot at `version` in one go (see the two halves)."""
    folded = fold_snapshot(history, version)
    return None if folded is None else publish_snapshot(history, folded, keep_snapshots, before_publish)


def _worth_writing(history: History, version: Version) -> bool:
    snapshots = history.snapshot_versions()
    if snapshots and max(snapshots) >= version:
        return False
    return version in history.changelog_versions()
