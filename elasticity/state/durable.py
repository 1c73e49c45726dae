"""A `StateStore` with no working set of its own: its state *is* its durable history.

Reads fold the newest snapshot at or below the store's version with the changelogs after it
(last write wins, a null value deletes), vectorized in Arrow; writes only append changelog
records (which is all a transaction's `prepare` makes durable anyway) and move the version.

Why it exists: the process that runs a migration (the stream's driver) touches a channel only
when a rescale happens, while the channel's live working set sits in some executor's RocksDB.
A RocksDB or in-memory store opened there would first rebuild the whole channel from history,
key by key, inside the rescale pause; this store reads exactly the hash ranges a donation
needs and writes the migration record as one file, leaving executors to apply it with their
usual `sync()` (only the moved keys). The durable history is the source of truth, so the
result is the same state, version for version.

`HistoryBackend.open` re-syncs the cached store on every call: other processes append to the
history between two opens (one per rescale), and a stale version would order a migration
record before batches that already ran.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from elasticity.hashing import hash_str
from elasticity.state.codecs import ValueCodec
from elasticity.state.files import Location
from elasticity.state.history import FileHistory, HashRanges, History, latest_version
from elasticity.state.records import (
    ENTRY_SCHEMA,
    INITIAL_VERSION,
    Version,
    concat_entries,
    empty_entries,
    filter_ranges,
)
from elasticity.state.store import KeyHasher, StateStore


def fold_entries(tables: list[pa.Table]) -> pa.Table:
    """Changelog-ordered entry tables -> the state they produce: the last write of each
    (hash, key) wins, deleted keys are gone, rows in (hash, key) order."""
    table = concat_entries(tables)
    if table.num_rows == 0:
        return empty_entries()
    hashes = table["hash"].to_numpy()
    if bool((hashes[:-1] < hashes[1:]).all()):
        # One hash-ordered file (esp writes them so): every key occurs once, in order.
        ordered = table
        superseded: np.ndarray | None = np.zeros(len(hashes), dtype=bool)
    else:
        # A stable sort on the int64 hash keeps each key's writes in changelog order and is
        # several times faster than Arrow's sort on (hash, key string, seq). Only two distinct
        # keys with one hash (a 64-bit collision) need the key in the sort.
        order = np.argsort(hashes, kind="stable")
        ordered = table.take(pa.array(order))
        superseded = _same_as_next(ordered, hashes[order])
        if superseded is None:
            seq = pa.array(np.arange(table.num_rows))
            sort_keys = [("hash", "ascending"), ("key", "ascending"), ("seq", "ascending")]
            ordered = table.take(pc.sort_indices(table.append_column("seq", seq), sort_keys=sort_keys))
            superseded = _same_as_next(ordered, ordered["hash"].to_numpy(), collisions_ok=True)
    assert superseded is not None  # with collisions_ok, _same_as_next always decides
    alive = ~superseded & ordered["value"].is_valid().to_numpy()
    kept = ordered if alive.all() else ordered.filter(pa.array(alive))
    return kept.select(ENTRY_SCHEMA.names).cast(ENTRY_SCHEMA)


def _same_as_next(ordered: pa.Table, hashes: np.ndarray, collisions_ok: bool = False) -> np.ndarray | None:
    """Which rows the next row overwrites (same hash and key); None if two different keys
    share a hash and `collisions_ok` is False (their writes may then interleave)."""
    n = len(hashes)
    superseded = np.zeros(n, dtype=bool)
    if n > 1:
        same_hash = hashes[:-1] == hashes[1:]
        keys = ordered["key"]
        same_key = pc.equal(keys.slice(0, n - 1), keys.slice(1)).to_numpy(zero_copy_only=False)
        if not collisions_ok and (same_hash & ~same_key).any():
            return None
        superseded[:-1] = same_hash & same_key
    return superseded


class HistoryStore(StateStore):
    """One channel's state read from and written to its `History` only (no local copy)."""

    def __init__(
        self, channel: int, codec: ValueCodec[Any], history: History, key_hasher: KeyHasher = hash_str
    ) -> None:
        super().__init__(channel, codec, history, key_hasher)
        self._version = INITIAL_VERSION
        # The full fold at one version, built on demand (point reads) and dropped when the
        # version moves; range scans of a cold store read only what they need.
        self._folded: tuple[Version, pa.Table, dict[tuple[int, str], bytes]] | None = None
        self.sync()

    # ---- primitives -------------------------------------------------------------------
    def _get_raw(self, key_hash: int, key: str) -> bytes | None:
        return self._full_fold()[2].get((key_hash, key))

    def _apply(self, changes: pa.Table, version: Version) -> None:
        # The changes are already durable (prepare wrote them): reads pick them up by version.
        self._set_version(version)

    def _scan(self, ranges: HashRanges | None) -> pa.Table:
        if self._folded is not None and self._folded[0] == self._version:
            table = self._folded[1]
            return table if ranges is None else filter_ranges(table, ranges)
        return self._fold(ranges)

    def _replace(self, entries: pa.Table, version: Version) -> None:
        # Only `restore` calls this, with history it then replays: the version is the state.
        self._set_version(version)

    def _count(self) -> int:
        return self._full_fold()[1].num_rows

    def _working_version(self) -> Version:
        return self._version

    # ---- history-backed working set ------------------------------------------------------
    def sync(self) -> Version:
        """The working set is the history: move to its newest version."""
        self._set_version(latest_version(self.history) or INITIAL_VERSION)
        return self._version

    def _set_version(self, version: Version) -> None:
        if version != self._version:
            self._folded = None
        self._version = version

    def _full_fold(self) -> tuple[Version, pa.Table, dict[tuple[int, str], bytes]]:
        if self._folded is None or self._folded[0] != self._version:
            table = self._fold(None)
            index = dict(zip(zip(table["hash"].to_pylist(), table["key"].to_pylist()), table["value"].to_pylist()))
            self._folded = (self._version, table, index)
        return self._folded

    def _fold(self, ranges: HashRanges | None) -> pa.Table:
        """Newest snapshot <= version, then every changelog after it up to the version."""
        target = self._version
        if target == INITIAL_VERSION:
            return empty_entries()
        snapshots = [s for s in self.history.snapshot_versions() if s <= target]
        base = snapshots[-1] if snapshots else INITIAL_VERSION
        changelogs = [self.history.read_changelog(v) for v in self.history.changelog_versions() if base < v <= target]
        if ranges is not None:  # the snapshot's read is already ranged
            changelogs = [filter_ranges(p, ranges) for p in changelogs]
        return fold_entries(([self.history.read_snapshot(base, ranges)] if snapshots else []) + changelogs)


class HistoryBackend:
    """`HistoryStore`s over `<durable>/channels/channel=<id>/`: the same layout as the
    Rocks and Memory backends, so it reads and writes the histories their executors keep."""

    def __init__(self, codec: ValueCodec[Any], durable: str, key_hasher: KeyHasher = hash_str) -> None:
        self.codec = codec
        self.key_hasher = key_hasher
        self._root = Location.of(durable).child("channels")
        self._stores: dict[int, HistoryStore] = {}
        self._lock = threading.Lock()

    def _history(self, channel: int) -> FileHistory:
        return FileHistory(self._root.child(f"channel={channel}"))

    def open(self, channel: int) -> StateStore:
        """The channel's store, synced to the newest durable version (cheap: a listing)."""
        with self._lock:
            store = self._stores.get(channel)
            if store is None:
                store = self._stores[channel] = HistoryStore(
                    channel, self.codec, self._history(channel), self.key_hasher
                )
            elif not store.in_transaction:
                store.sync()
            return store

    def drop(self, channel: int) -> None:
        """Delete a channel's durable history (idempotent)."""
        with self._lock:
            self._stores.pop(channel, None)
        self._history(channel).destroy()

    def channels(self) -> list[int]:
        return sorted(int(n.split("=", 1)[1]) for n in self._root.names() if n.startswith("channel="))

    def close(self) -> None:
        with self._lock:
            self._stores.clear()
