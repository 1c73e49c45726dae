"""RocksDB `StateStore` (via rocksdict): an executor-local working set whose durable form is
the `FileHistory` of per-batch changelogs and snapshots.

RocksDB keys are `8-byte big-endian (hash XOR sign bit) + UTF-8 key`, so entries sit in hash
order and the entries of a hash range — what a migration donates — are one contiguous scan.
The committed version lives under the empty key (which sorts before every entry) and is
written in the same `WriteBatch` as the changes it describes, so a crash never leaves state
and version disagreeing. The number of entries lives under `b"\\x00"` (after the version,
before every entry) and is kept the same way, so `len()` is one read, not a scan of the
channel (it is reported every batch). UTF-8 never contains 0xFF, which bounds the key space for
`delete_range`.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Iterable
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rocksdict import Checkpoint, Options, Rdict, WriteBatch, WriteOptions

from elasticity.hashing import hash_str
from elasticity.state.codecs import ValueCodec
from elasticity.state.history import HashRanges, History
from elasticity.state.records import INITIAL_VERSION, Version, count_delta_of, entries_table, vacated_ranges_of
from elasticity.state.store import KeyHasher, StateStore

_META_KEY = b""
_META = struct.Struct("<qq")
_COUNT_KEY = b"\x00"
_COUNT = struct.Struct("<q")
_SIGN = np.uint64(1 << 63)
_FIRST_ENTRY = b"\x00" * 8
_PAST_LAST_ENTRY = b"\xff" * 9
_MAX_HASH = (1 << 63) - 1


def _prefix(key_hash: int) -> bytes:
    return (key_hash + (1 << 63)).to_bytes(8, "big")


def _encode_keys(entries: pa.Table) -> list[bytes]:
    """RocksDB keys of the rows: the order-preserving 8-byte hash prefix, then the UTF-8 key
    (joined in Arrow: a Python loop over the keys cost 3x more)."""
    hashes = entries["hash"].to_numpy()
    prefixes = (np.asarray(hashes, dtype=np.int64).view(np.uint64) ^ _SIGN).astype(">u8").tobytes()
    prefix_array = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), len(hashes), [None, pa.py_buffer(prefixes)])
    keys = entries["key"].combine_chunks().cast(pa.binary())
    return pc.binary_join_element_wise(prefix_array.cast(pa.binary()), keys, b"").to_pylist()


def _decode_hashes(rkeys: list[bytes]) -> np.ndarray:
    joined = b"".join(k[:8] for k in rkeys)
    return (np.frombuffer(joined, dtype=">u8").astype(np.uint64) ^ _SIGN).view(np.int64)


def _working_copy_writes() -> WriteOptions:
    """Writes without RocksDB's write-ahead log. A working copy is a cache of the durable history,
    which has already made each change durable before it is applied here. A copy whose process died is
    swept, never reopened by another worker. If it is reopened (an offline rescale's scratch store), it
    comes back at its last flush, a whole write batch, with its version, and `sync()` replays the history
    from there. The log cost a 2M-entry apply (a new channel's rebuild at 1e7 keys) ~0.1 s of ~0.7 s
    and 39 MB of writes."""
    options = WriteOptions()
    # A property at run time; rocksdict's stubs declare a method, and calling it fails.
    options.disable_wal = True  # type: ignore[method-assign,assignment]
    return options


def default_options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    return options


class RocksStore(StateStore):
    """One channel's state in a local RocksDB directory, synced from its durable history."""

    def __init__(
        self,
        channel: int,
        codec: ValueCodec[Any],
        history: History,
        local_path: str,
        key_hasher: KeyHasher = hash_str,
        options: Options | None = None,
    ) -> None:
        super().__init__(channel, codec, history, key_hasher)
        self.local_path = local_path
        self._options = options if options is not None else default_options()
        self._db: Rdict | None = Rdict(local_path, self._options)
        try:
            self._db.set_write_options(_working_copy_writes())
            self.sync()
        except BaseException:
            self.close()  # an open RocksDB keeps its folder locked: a retry could not open it
            raise

    @property
    def db(self) -> Rdict:
        if self._db is None:
            raise RuntimeError(f"RocksStore for channel {self.channel} is closed")
        return self._db

    def _get_raw(self, key_hash: int, key: str) -> bytes | None:
        return self.db.get(_prefix(key_hash) + key.encode("utf-8"))

    def _apply(self, changes: pa.Table, version: Version) -> None:
        declared = count_delta_of(changes)
        vacated = vacated_ranges_of(changes) if declared is not None else None
        batch = WriteBatch(raw_mode=True)
        if vacated is not None:
            # One range tombstone per emptied range instead of one delete per donated key.
            for start, end in vacated:
                batch.delete_range(_prefix(start), _prefix(end + 1) if end < _MAX_HASH else _PAST_LAST_ENTRY)
            changes = changes.filter(pc.is_valid(changes["value"]))
        changed: Iterable[tuple[bytes, bytes | None]] = zip(_encode_keys(changes), changes["value"].to_pylist())
        count = self._count()
        if declared is None:
            # The changelog applies in order, so a key's last change is its outcome.
            final = dict(changed)
            declared, changed = self._count_change(final, count), final.items()
        # A write batch applies in order too: repeated keys need no dedupe here.
        for rkey, value in changed:
            if value is None:
                batch.delete(rkey)
            else:
                batch.put(rkey, value)
        batch.put(_META_KEY, _META.pack(version.batch, version.migration))
        batch.put(_COUNT_KEY, _COUNT.pack(count + declared))
        self.db.write(batch)

    def _count_change(self, final: dict[bytes, bytes | None], count: int) -> int:
        """Entries added minus entries removed, for a changelog that does not declare it: one
        multi-get of the changed keys (~4 µs a key), unless the store is empty."""
        if not final or count == 0:
            return sum(value is not None for value in final.values())
        existed = cast(list[bytes | None], self.db.get(list(final)))
        return sum(int(value is not None) - int(before is not None) for value, before in zip(final.values(), existed))

    def _scan(self, ranges: HashRanges | None) -> pa.Table:
        bounds = [(_FIRST_ENTRY, None)] if ranges is None else [(_prefix(s), _prefix(e)) for s, e in ranges]
        rkeys: list[bytes] = []
        values: list[bytes] = []
        for low, high in bounds:
            # raw_mode: keys and values are bytes (the stubs name every type rocksdict can hold).
            for rkey, value in cast(Iterable[tuple[bytes, bytes]], self.db.items(from_key=low)):
                if high is not None and rkey[:8] > high:
                    break
                rkeys.append(rkey)
                values.append(value)
        keys = [k[8:].decode("utf-8") for k in rkeys]
        return entries_table(_decode_hashes(rkeys), keys, values)

    def _replace(self, entries: pa.Table, version: Version) -> None:
        batch = WriteBatch(raw_mode=True)
        batch.delete_range(_FIRST_ENTRY, _PAST_LAST_ENTRY)
        rkeys = _encode_keys(entries)
        for rkey, value in zip(rkeys, entries["value"].to_pylist()):
            batch.put(rkey, value)
        batch.put(_META_KEY, _META.pack(version.batch, version.migration))
        batch.put(_COUNT_KEY, _COUNT.pack(len(set(rkeys))))
        self.db.write(batch)

    def _count(self) -> int:
        raw = self.db.get(_COUNT_KEY)
        if raw is not None:
            return _COUNT.unpack(raw)[0]
        # A new working set, or one written before the count was kept: count it once.
        return sum(1 for _ in self.db.keys(from_key=_FIRST_ENTRY))

    def _working_version(self) -> Version:
        raw = self.db.get(_META_KEY)
        return INITIAL_VERSION if raw is None else Version(*_META.unpack(raw))

    def checkpoint(self, path: str) -> None:
        """A consistent copy of the working set in the new folder `path` (RocksDB's checkpoint:
        the memtable flushed, its files hard-linked), at whatever version it holds then: another
        process may open it as its own working copy (`clone_working_copy`) and `sync()` from there."""
        Checkpoint(self.db).create_checkpoint(path)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _drop_working_set(self) -> None:
        Rdict.destroy(self.local_path, self._options)


def clone_working_copy(checkpoint: str, target: str) -> None:
    """Make the new folder `target` a working copy of the RocksDB checkpoint at `checkpoint`.

    Table files (`.sst`) never change once written, so they are hard-linked (copied where links
    are refused); the rest (MANIFEST, log, CURRENT, OPTIONS) is copied, since the opening process
    appends to it. The checkpoint itself is never opened, so any number of processes can clone it."""
    os.makedirs(target)
    for name in os.listdir(checkpoint):
        source, copy = os.path.join(checkpoint, name), os.path.join(target, name)
        if name.endswith(".sst"):
            try:
                os.link(source, copy)
                continue
            except OSError:
                pass  # another filesystem, or links refused: a copy is as good, only slower
        shutil.copyfile(source, copy)
