"""A census of an elastic stage's durable state under its committed layout: every stored key,
the channel that stores it, the channel its hash routes to, and its value (a count's int64 for
the counting pipelines; for any other operator, the size in bytes of its stored value).

A key's timers are stored under `TIMER_PREFIX + key` with the key's own hash (so they move with
it); the census routes and checks such an entry by the key it belongs to.

Read straight from the durable histories (`HistoryBackend`: never the stream's own RocksDB
working sets, which a running stream holds locked), at one batch version common to all channels.
Pure Python: no Dagster, no Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from elasticity.hashing import hash_str
from elasticity.layout import Layout
from elasticity.migration.registry import LayoutRegistry
from elasticity.operators.timers import TIMER_PREFIX
from elasticity.state import BytesCodec, HistoryBackend, Int64Codec, Location

if TYPE_CHECKING:  # pandas (~2 s to import) loads only where a check runs, not in every run worker
    import pandas as pd

CENSUS_COLUMNS = ["key", "channel", "routed_channel", "stored_hash", "key_hash", "value"]


@dataclass
class StateCensus:
    """The state of every channel at `batch`, under the committed `layout`."""

    layout: Layout
    batch: int
    rows: pd.DataFrame
    per_channel: dict[int, dict[str, int]] = field(default_factory=dict)
    stray_channels: list[int] = field(default_factory=list)
    """Channels with stored state that the committed layout does not have."""

    @property
    def keys(self) -> int:
        return int(self.rows["key"].nunique())

    @property
    def total(self) -> int:
        return int(self.rows["value"].sum()) if len(self.rows) else 0


ValueOf = Callable[[bytes], int]
"""A stored value → the census' int64 `value`."""

COUNT_VALUE: ValueOf = Int64Codec().decode
STORED_BYTES: ValueOf = len


def owner_key(key: str) -> str:
    """The key whose hash places `key`: itself, or for a timer entry the key the timers belong to."""
    return key[len(TIMER_PREFIX) :] if key.startswith(TIMER_PREFIX) else key


def _rows_of(store, layout: Layout, value_of: ValueOf) -> pd.DataFrame:
    import pandas as pd

    entries = store.entries()
    keys = entries["key"].to_pylist()
    values = [value_of(v) for v in entries["value"].to_pylist()]
    key_hashes = np.array([hash_str(owner_key(k)) for k in keys], dtype=np.int64)
    routed = layout.lookup(key_hashes) if len(keys) else np.array([], dtype=np.int64)
    return pd.DataFrame(
        {
            "key": keys,
            "channel": np.full(len(keys), store.channel, dtype=np.int64),
            "routed_channel": routed.astype(np.int64),
            "stored_hash": entries["hash"].to_numpy(zero_copy_only=False).astype(np.int64),
            "key_hash": key_hashes,
            "value": np.array(values, dtype=np.int64),
        },
        columns=CENSUS_COLUMNS,
    )


def take_census(
    elastic_root: str, *, batch_complete=lambda batch: True, value_of: ValueOf = COUNT_VALUE
) -> StateCensus:
    """Census of the state under `elastic_root` at the newest batch every channel can show.

    `batch_complete(b)` says whether the stream finished writing batch b's results; if the newest
    batch is not complete yet (a stream mid-batch), the census is taken one batch earlier.
    """
    import pandas as pd

    layout = LayoutRegistry(Location.of(elastic_root)).committed()
    backend = HistoryBackend(BytesCodec(), durable=elastic_root)
    channels = sorted(set(layout.channels) | set(backend.channels()))
    stores = {c: backend.open(c) for c in channels}
    batch = max((s.version.batch for s in stores.values()), default=-1)
    if batch >= 0 and not batch_complete(batch):
        batch -= 1
        for store in stores.values():
            if store.version.batch > batch:
                store.restore(batch)
    frames = [_rows_of(store, layout, value_of) for store in stores.values()]
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=CENSUS_COLUMNS)
    per_channel = {
        c: {"keys": int((rows["channel"] == c).sum()), "sum": int(rows.loc[rows["channel"] == c, "value"].sum())}
        for c in channels
    }
    stray = [c for c in channels if c not in set(layout.channels) and per_channel[c]["keys"]]
    return StateCensus(layout, batch, rows, per_channel, stray)
