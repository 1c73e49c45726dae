"""The partitioned keyed state store: one `StateStore` per channel, written in versioned batches.

Every change goes through a `Transaction` with an explicit state machine (quix-streams style):

    STARTED --prepare--> PREPARED --commit--> COMPLETE
       \\________________\\--abort/error--> FAILED

`prepare` makes the changes durable (a changelog record in the store's `History`); `commit`
applies them to the working set (dict or RocksDB) together with the new version, atomically.
A crash between the two is repaired by `sync()` on the next open, which replays durable
records the working set lacks. `begin(batch_id)` for a batch id already committed returns a
*replay* transaction whose writes are ignored: re-running a batch after a failure is a no-op,
which together with Spark's Kafka offsets gives exactly-once state.

Keys are strings hashed with `elasticity.hashing.hash_str` (Spark's `xxhash64` of a string
column) unless the store is given another `key_hasher`, or the caller passes the hash it
already has (`key_hash=`, e.g. computed in the JVM). Values are encoded by the store's
`ValueCodec`. Implementations provide six primitives (`_get_raw`, `_apply`, `_scan`,
`_replace`, `_count`, `_working_version`); everything else is shared and tested once.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from types import TracebackType
from typing import Any

import pyarrow as pa

from elasticity.hashing import hash_str
from elasticity.state.codecs import ValueCodec
from elasticity.state.history import HashRanges, History, latest_version, prune
from elasticity.state.records import (
    INITIAL_VERSION,
    Version,
    as_deletions,
    concat_entries,
    empty_entries,
    entries_table,
    with_count_delta,
    with_vacated_ranges,
)

KeyHasher = Callable[[str], int]


class TxState(Enum):
    STARTED = "started"
    PREPARED = "prepared"
    COMPLETE = "complete"
    FAILED = "failed"


_ALLOWED: dict[TxState, frozenset[TxState]] = {
    TxState.STARTED: frozenset({TxState.PREPARED, TxState.FAILED}),
    TxState.PREPARED: frozenset({TxState.COMPLETE, TxState.FAILED}),
    TxState.COMPLETE: frozenset(),
    TxState.FAILED: frozenset(),
}


class TransactionStateError(RuntimeError):
    """An operation the transaction's current state does not allow."""


class StateStoreError(RuntimeError):
    """A store asked for something its history cannot give (e.g. a pruned version)."""


class Transaction:
    """The changes of one batch (or one migration step) to one channel."""

    def __init__(self, store: StateStore, version: Version, replay: bool) -> None:
        self.store = store
        self.version = version
        self.is_replay = replay
        self._state = TxState.STARTED
        self._single: dict[tuple[int, str], bytes | None] = {}
        self._bulk: list[pa.Table] = []
        self._changes: pa.Table | None = None
        # Entries added minus removed, while every write so far declared its keys' presence.
        self._count_delta: int | None = 0
        # Hash ranges this transaction empties, while every deletion so far lies in one of them.
        self._vacated: list[tuple[int, int]] | None = []

    @property
    def state(self) -> TxState:
        return self._state

    def _move(self, target: TxState) -> None:
        if target not in _ALLOWED[self._state]:
            raise TransactionStateError(f"transaction {self.version} cannot go {self._state.value} -> {target.value}")
        self._state = target
        if target in (TxState.COMPLETE, TxState.FAILED):
            self.store._release(self)  # noqa: SLF001 (a transaction is part of its store)

    def _writable(self) -> None:
        if self._state is not TxState.STARTED:
            raise TransactionStateError(f"transaction {self.version} is {self._state.value}; writes need STARTED")

    # ---- writes ---------------------------------------------------------------------------
    def put(self, key: str, value: Any, *, key_hash: int | None = None) -> None:
        self._writable()
        self._count_delta = None
        self._single[(self.store.hash_of(key, key_hash), key)] = self.store.codec.encode(value)

    def delete(self, key: str, *, key_hash: int | None = None) -> None:
        self._writable()
        self._count_delta = self._vacated = None
        self._single[(self.store.hash_of(key, key_hash), key)] = None

    def put_entries(self, entries: pa.Table, *, absent: bool = False) -> None:
        """Bulk upsert of already-encoded (hash, key, value) rows; applied before single writes.
        `absent=True` promises that none of these distinct keys is in the store or this
        transaction yet (a migration's incoming ranges), so the entry count moves unread."""
        self._writable()
        self._declare(entries.num_rows if absent else None)
        self._bulk.append(entries)

    def delete_entries(
        self, entries: pa.Table, *, present: bool = False, vacated: Sequence[tuple[int, int]] | None = None
    ) -> None:
        """Bulk delete of the (hash, key) rows of `entries`; applied before single writes.
        `present=True` promises that every one of these distinct keys is in the store (a
        migration's donated entries, read from it); `vacated` that they are all of its keys in
        these inclusive hash ranges, and that no write of this transaction puts a key in them."""
        self._writable()
        self._declare(-entries.num_rows if present else None)
        if vacated is not None and self._vacated is not None:
            self._vacated.extend(vacated)
        elif entries.num_rows:
            self._vacated = None
        self._bulk.append(as_deletions(entries))

    def _declare(self, delta: int | None) -> None:
        self._count_delta = None if delta is None or self._count_delta is None else self._count_delta + delta

    def get(self, key: str, *, key_hash: int | None = None) -> Any:
        """Read-your-writes for single writes; otherwise the committed value."""
        h = self.store.hash_of(key, key_hash)
        if (h, key) in self._single:
            raw = self._single[(h, key)]
            return None if raw is None else self.store.codec.decode(raw)
        return self.store.get(key, key_hash=h)

    def changes(self) -> pa.Table:
        """Every change as one changelog table (null value = delete), in application order."""
        if self._changes is None:
            single = entries_table(
                [h for h, _ in self._single], [k for _, k in self._single], list(self._single.values())
            )
            changes = with_count_delta(concat_entries([*self._bulk, single]), self._count_delta)
            self._changes = with_vacated_ranges(changes, self._vacated or None)
        return self._changes

    # ---- state machine --------------------------------------------------------------------
    def prepare(self) -> None:
        """Make the changes durable (no effect on what readers see yet)."""
        if self._state is not TxState.STARTED:
            raise TransactionStateError(f"cannot prepare a {self._state.value} transaction")
        try:
            if not self.is_replay:
                self.store.history.write_changelog(self.version, self.changes())
        except BaseException:
            self._move(TxState.FAILED)
            raise
        self._move(TxState.PREPARED)

    def commit(self) -> None:
        """Prepare if needed, then apply to the working set with the new version."""
        if self._state is TxState.STARTED:
            self.prepare()
        if self._state is not TxState.PREPARED:
            raise TransactionStateError(f"cannot commit a {self._state.value} transaction")
        try:
            if not self.is_replay:
                self.store._apply(self.changes(), self.version)  # noqa: SLF001 (part of its store)
        except BaseException:
            self._fail_prepared()
            raise
        self._move(TxState.COMPLETE)

    def abort(self) -> None:
        """Give up; a prepared record is withdrawn so no later sync replays it."""
        if self._state is TxState.PREPARED:
            self._fail_prepared()
        elif self._state is TxState.STARTED:
            self._move(TxState.FAILED)
        else:
            raise TransactionStateError(f"cannot abort a {self._state.value} transaction")

    def _fail_prepared(self) -> None:
        if not self.is_replay:
            self.store.history.remove_changelog(self.version)
        self._move(TxState.FAILED)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.commit()
        elif self._state in (TxState.STARTED, TxState.PREPARED):
            self.abort()


@dataclass(frozen=True)
class RestoreTiming:
    """What the last `restore()` read back and how long each part took (seed 003's recovery model
    learns its restore and fold rates from these)."""

    snapshot_entries: int
    snapshot_bytes: int
    """In-memory (Arrow) size of the snapshot restored; 0 when there was none."""
    restore_s: float
    changelog_entries: int
    """Entries of the changelogs folded after the snapshot."""
    fold_s: float


class StateStore(ABC):
    """Keyed state of one channel, versioned by micro-batch id and migration epoch."""

    def __init__(
        self, channel: int, codec: ValueCodec[Any], history: History, key_hasher: KeyHasher = hash_str
    ) -> None:
        self.channel = channel
        self.codec = codec
        self.history = history
        self.key_hasher = key_hasher
        self._open_tx: Transaction | None = None
        self.last_restore: RestoreTiming | None = None

    # ---- backend primitives ----------------------------------------------------------------
    @abstractmethod
    def _get_raw(self, key_hash: int, key: str) -> bytes | None: ...

    @abstractmethod
    def _apply(self, changes: pa.Table, version: Version) -> None:
        """Apply changelog rows in order and set the version, atomically."""

    @abstractmethod
    def _scan(self, ranges: HashRanges | None) -> pa.Table:
        """Entries (hash-sorted) whose hash lies in the inclusive ranges; all if None."""

    @abstractmethod
    def _replace(self, entries: pa.Table, version: Version) -> None:
        """Make the working set exactly `entries` at `version`, atomically."""

    @abstractmethod
    def _count(self) -> int: ...

    @abstractmethod
    def _working_version(self) -> Version: ...

    def close(self) -> None:
        """Release the working set's resources (files, handles); a hook, nothing by default."""
        return None

    def _drop_working_set(self) -> None:
        """Delete the working set's own files; a hook, nothing by default (in-memory stores)."""
        return None

    # ---- reads --------------------------------------------------------------------------
    @property
    def version(self) -> Version:
        return self._working_version()

    def hash_of(self, key: str, key_hash: int | None = None) -> int:
        return self.key_hasher(key) if key_hash is None else int(key_hash)

    def get(self, key: str, *, key_hash: int | None = None) -> Any:
        raw = self._get_raw(self.hash_of(key, key_hash), key)
        return None if raw is None else self.codec.decode(raw)

    def items(self) -> Iterator[tuple[str, Any]]:
        table = self._scan(None)
        decode = self.codec.decode
        for key, value in zip(table["key"].to_pylist(), table["value"].to_pylist()):
            yield key, decode(value)

    def entries(self, ranges: HashRanges | None = None) -> pa.Table:
        """Raw (hash, key, value) rows in hash order, optionally only inside hash ranges."""
        return self._scan(ranges)

    def __len__(self) -> int:
        return self._count()

    # ---- versioned writes -----------------------------------------------------------------
    def begin(self, batch_id: int) -> Transaction:
        """Open the transaction of micro-batch `batch_id` (a replay no-op if already committed)."""
        current = self.version
        return self._open(Version(batch_id, current.migration), replay=batch_id <= current.batch)

    def begin_migration(self, epoch: int) -> Transaction:
        """Open the transaction that moves state into/out of this channel for layout `epoch`."""
        current = self.version
        return self._open(Version(current.batch, epoch), replay=epoch <= current.migration)

    def is_committed(self, batch_id: int) -> bool:
        return batch_id <= self.version.batch

    @property
    def in_transaction(self) -> bool:
        """A transaction is open (its changes are not yet applied or abandoned)."""
        return self._open_tx is not None

    def _open(self, version: Version, replay: bool) -> Transaction:
        if self._open_tx is not None:
            raise TransactionStateError(f"channel {self.channel} already has open transaction {self._open_tx.version}")
        self._open_tx = Transaction(self, version, replay)
        return self._open_tx

    def _release(self, tx: Transaction) -> None:
        if self._open_tx is tx:
            self._open_tx = None

    # ---- durability -----------------------------------------------------------------------
    def snapshot(self, keep_snapshots: int | None = None) -> Version:
        """Write the full state at the current version; optionally prune older history."""
        version = self.version
        self.history.write_snapshot(version, self._scan(None))
        if keep_snapshots is not None:
            prune(self.history, keep_snapshots)
        return version

    def restore(self, version: Version | int | None = None, discard_later: bool = False) -> Version:
        """Rebuild the working set as of `version` (an int means: after that batch id and any
        migration applied before the next batch); None means the newest durable version.
        With `discard_later`, durable records after `version` are deleted (a real rewind);
        otherwise the next `sync()` moves forward again."""
        target = self._resolve(version)
        if discard_later:
            for later in self.history.changelog_versions():
                if later > target:
                    self.history.remove_changelog(later)
            for later in self.history.snapshot_versions():
                if later > target:
                    self.history.remove_snapshot(later)
        snapshots = self.history.snapshot_versions()
        changelogs = self.history.changelog_versions()
        if target != INITIAL_VERSION and target not in set(snapshots) | set(changelogs):
            raise StateStoreError(f"channel {self.channel} has no durable version {target}")
        # A snapshot whose own changelog is gone marks pruned history: nothing older is restorable.
        pruned_before = next((s for s in snapshots if s != INITIAL_VERSION and s not in set(changelogs)), None)
        if pruned_before is not None and target < pruned_before:
            raise StateStoreError(f"channel {self.channel}: history before {pruned_before} was pruned")
        usable = [s for s in snapshots if s <= target]
        base = usable[-1] if usable else INITIAL_VERSION
        started = time.perf_counter()
        snapshot = self.history.read_snapshot(base) if usable else empty_entries()
        self._replace(snapshot, base)
        restored = time.perf_counter()
        folded = 0
        for v in changelogs:
            if base < v <= target:
                changes = self.history.read_changelog(v)
                self._apply(changes, v)
                folded += changes.num_rows
        self.last_restore = RestoreTiming(
            snapshot_entries=snapshot.num_rows,
            snapshot_bytes=snapshot.nbytes,
            restore_s=restored - started,
            changelog_entries=folded,
            fold_s=time.perf_counter() - restored,
        )
        return self.version

    def _resolve(self, version: Version | int | None) -> Version:
        if isinstance(version, Version):
            return version
        known = self.history.changelog_versions() + self.history.snapshot_versions()
        if version is None:
            return max(known) if known else INITIAL_VERSION
        eligible = [v for v in known if v.batch <= version]
        if not eligible:
            raise StateStoreError(f"channel {self.channel} has no history at or before batch {version}")
        return max(eligible)

    def sync(self) -> Version:
        """Bring the working set up to the newest durable version: replay what it lacks, or
        rebuild it if it is ahead of (rolled back) or detached from (pruned) the history."""
        local = self.version
        durable = latest_version(self.history)
        if durable is None:
            if local != INITIAL_VERSION:
                self._replace(empty_entries(), INITIAL_VERSION)
            return self.version
        if local == durable:
            return local
        if local == INITIAL_VERSION:
            # A fresh working set: read the newest snapshot back rather than every changelog
            # before it (and time the rebuild, `last_restore`).
            return self.restore(durable)
        changelogs = self.history.changelog_versions()
        snapshots = self.history.snapshot_versions()
        known = set(changelogs) | set(snapshots) | {INITIAL_VERSION}
        # Replaying is only sound if every change after `local` still has its changelog, i.e.
        # no snapshot after `local` stands in for pruned changelogs.
        pruned_after_local = any(s > local and s not in set(changelogs) for s in snapshots)
        if local < durable and local in known and not pruned_after_local:
            for v in changelogs:
                if v > local:
                    self._apply(self.history.read_changelog(v), v)
            return self.version
        return self.restore(durable)

    def destroy(self) -> None:
        """Delete this channel's working set and its whole durable history."""
        self.close()
        self._drop_working_set()
        self.history.destroy()
