"""In-memory `StateStore`: the working set is a dict; durability comes from its `History`
(a `MemoryHistory` by default, or a `FileHistory` for an in-memory store whose changelogs and
snapshots still go to a Hadoop-compatible path)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from elasticity.hashing import hash_str
from elasticity.state.codecs import ValueCodec
from elasticity.state.history import HashRanges, History, MemoryHistory
from elasticity.state.records import INITIAL_VERSION, Version, entries_table, filter_ranges, sort_entries
from elasticity.state.store import KeyHasher, StateStore


class MemoryStore(StateStore):
    """A dict of (hash, key) -> encoded value, plus the version it reflects."""

    def __init__(
        self,
        channel: int,
        codec: ValueCodec[Any],
        history: History | None = None,
        key_hasher: KeyHasher = hash_str,
    ) -> None:
        super().__init__(channel, codec, history if history is not None else MemoryHistory(), key_hasher)
        self._data: dict[tuple[int, str], bytes] = {}
        self._version = INITIAL_VERSION
        self.sync()

    def _get_raw(self, key_hash: int, key: str) -> bytes | None:
        return self._data.get((key_hash, key))

    def _apply(self, changes: pa.Table, version: Version) -> None:
        data = self._data
        for h, k, v in zip(changes["hash"].to_pylist(), changes["key"].to_pylist(), changes["value"].to_pylist()):
            if v is None:
                data.pop((h, k), None)
            else:
                data[(h, k)] = v
        self._version = version

    def _scan(self, ranges: HashRanges | None) -> pa.Table:
        hashes = np.fromiter((h for h, _ in self._data), dtype=np.int64, count=len(self._data))
        table = entries_table(hashes, [k for _, k in self._data], list(self._data.values()))
        if ranges is not None:
            table = filter_ranges(table, ranges)
        return sort_entries(table)

    def _replace(self, entries: pa.Table, version: Version) -> None:
        self._data = {
            (h, k): v
            for h, k, v in zip(entries["hash"].to_pylist(), entries["key"].to_pylist(), entries["value"].to_pylist())
        }
        self._version = version

    def _count(self) -> int:
        return len(self._data)

    def _working_version(self) -> Version:
        return self._version
