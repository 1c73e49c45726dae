"""State versions and the Arrow form of state entries shared by changelogs, snapshots and
migration files.

An entry is (hash int64, key string, value binary); a null value in a changelog means "deleted".
The key's hash travels with it so that routing a stored entry never needs re-hashing (and so
the JVM can hand us hashes it already computed).

A `Version` orders everything that ever changed a channel's state: `batch` is the last
micro-batch id applied, `migration` the last layout epoch whose migration was applied. A batch
record carries the migration epoch current when it ran, so (batch, migration) is strictly
increasing across all records of one channel.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ENTRY_SCHEMA = pa.schema(
    [
        pa.field("hash", pa.int64(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("value", pa.binary(), nullable=True),
    ]
)


@dataclass(frozen=True, order=True)
class Version:
    """Position of a channel's state: after micro-batch `batch` and migration epoch `migration`."""

    batch: int
    migration: int = 0

    def name(self) -> str:
        # +1 so the initial batch -1 still gives a sortable, non-negative file name.
        return f"b{self.batch + 1:020d}-m{self.migration:010d}"

    @classmethod
    def parse(cls, name: str) -> Version:
        stem = name.split(".", 1)[0]
        batch_part, migration_part = stem.split("-")
        return cls(int(batch_part[1:]) - 1, int(migration_part[1:]))


INITIAL_VERSION = Version(-1, 0)


def entries_table(hashes: Sequence[int] | np.ndarray, keys: Sequence[str], values: Sequence[bytes | None]) -> pa.Table:
    return pa.table(
        {
            "hash": pa.array(hashes, type=pa.int64()),
            "key": pa.array(keys, type=pa.string()),
            "value": pa.array(values, type=pa.binary()),
        },
        schema=ENTRY_SCHEMA,
    )


def empty_entries() -> pa.Table:
    return ENTRY_SCHEMA.empty_table()


def as_deletions(table: pa.Table) -> pa.Table:
    """The same keys with null values: a changelog that deletes them."""
    return pa.table(
        {"hash": table["hash"], "key": table["key"], "value": pa.nulls(table.num_rows, type=pa.binary())},
        schema=ENTRY_SCHEMA,
    )


def concat_entries(tables: Sequence[pa.Table]) -> pa.Table:
    tables = [t.cast(ENTRY_SCHEMA) for t in tables if t.num_rows]
    return pa.concat_tables(tables).combine_chunks() if tables else empty_entries()


COUNT_DELTA = b"esp.count_delta"
"""Schema metadata of a changelog whose writer knew how many entries it adds (puts of absent
keys minus deletes of present ones): applying it then needs no read of the changed keys."""


def with_count_delta(table: pa.Table, delta: int | None) -> pa.Table:
    if delta is None:
        return table
    return table.replace_schema_metadata({**(table.schema.metadata or {}), COUNT_DELTA: str(delta).encode()})


def count_delta_of(table: pa.Table) -> int | None:
    """The entry-count change a changelog declares, or None if its writer did not know it."""
    raw = (table.schema.metadata or {}).get(COUNT_DELTA)
    return None if raw is None else int(raw)


VACATED_RANGES = b"esp.vacated_ranges"
"""Schema metadata of a changelog that empties whole hash ranges (a migration's donor): its
deletions are exactly the store's keys in them, so a store may drop each range in one step."""


def with_vacated_ranges(table: pa.Table, ranges: Sequence[tuple[int, int]] | None) -> pa.Table:
    if ranges is None:
        return table
    encoded = json.dumps([[int(start), int(end)] for start, end in ranges]).encode()
    return table.replace_schema_metadata({**(table.schema.metadata or {}), VACATED_RANGES: encoded})


def vacated_ranges_of(table: pa.Table) -> list[tuple[int, int]] | None:
    """The inclusive hash ranges a changelog declares emptied, or None."""
    raw = (table.schema.metadata or {}).get(VACATED_RANGES)
    return None if raw is None else [(start, end) for start, end in json.loads(raw)]


def in_ranges_mask(hashes: np.ndarray, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """Which hashes fall in any of the sorted, disjoint, inclusive `ranges` (vectorized)."""
    if not ranges:
        return np.zeros(len(hashes), dtype=bool)
    starts = np.array([r[0] for r in ranges], dtype=np.int64)
    ends = np.array([r[1] for r in ranges], dtype=np.int64)
    idx = np.searchsorted(starts, hashes, side="right") - 1
    inside = idx >= 0
    inside[inside] = hashes[inside] <= ends[idx[inside]]
    return inside


def filter_ranges(table: pa.Table, ranges: Sequence[tuple[int, int]]) -> pa.Table:
    """The rows whose hash lies in the ranges (the table itself when all do: a whole channel's
    donation would otherwise copy it)."""
    mask = in_ranges_mask(table["hash"].to_numpy(), ranges)
    return table if mask.all() else table.filter(pa.array(mask))


def sort_entries(table: pa.Table) -> pa.Table:
    """Hash order (then key), the order of RocksDB and of every file esp writes."""
    return table.take(pc.sort_indices(table, sort_keys=[("hash", "ascending"), ("key", "ascending")]))
