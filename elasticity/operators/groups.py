"""Vectorized grouping of a channel's batch by key: the first step of most operators.

Keys come out in first-appearance order and each key's rows keep their arrival order, so an
operator that folds rows in order (sessions, sketches) behaves the same however the batch was
split over channels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from elasticity.operators.types import HASH_COLUMN


@dataclass(frozen=True)
class KeyGroups:
    """Distinct keys of a batch, their hashes, and the row indices of each (arrival order)."""

    keys: list[str]
    hashes: list[int]
    rows: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.keys)


def group_rows(table: pa.Table, key_column: str) -> KeyGroups:
    if table.num_rows == 0:
        return KeyGroups([], [], [])
    encoded = pc.dictionary_encode(table[key_column].combine_chunks())
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes, minlength=len(encoded.dictionary))
    rows = np.split(order, np.cumsum(counts)[:-1])
    hashes = table[HASH_COLUMN].to_numpy()
    return KeyGroups(
        encoded.dictionary.to_pylist(),
        [int(hashes[r[0]]) for r in rows],
        rows,
    )
