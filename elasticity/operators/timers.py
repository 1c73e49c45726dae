"""Per-key timers, stored IN the channel's state store so they move and replay with the key.

All of one key's timers are one store entry: key `TIMER_PREFIX + <user key>`, placed under the
user key's own hash (so every layout operation moves a key's timers with its state, and a
batch transaction writes them atomically with it), value a JSON list of [domain, time] pairs.
The prefix starts with NUL, which user keys of an operator with timers may not (`reserved_keys`): rows
with such keys are rejected with `RESERVED_KEY_REASON`, never run.

Finding due timers must not scan the store every batch, so each channel keeps a `TimerIndex`
in memory: rebuilt from one scan of the reserved namespace whenever the store's version is not
the one the index last saw (first use, after a migration moved keys in or out, after a restore),
and kept up to date by the batch's own timer writes otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from elasticity.operators.types import FIRED_SCHEMA, HASH_COLUMN
from elasticity.state.records import Version
from elasticity.state.store import StateStore

RESERVED_PREFIX = "\x00"
"""Keys starting with this belong to esp (timers), never to an operator's state."""

TIMER_PREFIX = RESERVED_PREFIX + "timer:"

TTL_DOMAIN = "ttl"
"""Internal processing-time timers that delete expired state (see `StateView`)."""

Timer = tuple[str, int]
"""(domain, time in ms); domain is a `TimeDomain` value or `TTL_DOMAIN`."""


@dataclass(frozen=True, order=True)
class DueTimer:
    time: int
    key: str
    domain: str
    key_hash: int


def timer_key(key: str) -> str:
    return TIMER_PREFIX + key


def encode_timers(timers: Iterable[Timer]) -> bytes:
    return json.dumps(sorted(set(timers)), separators=(",", ":")).encode()


def decode_timers(data: bytes | None) -> list[Timer]:
    return [] if data is None else [(str(d), int(t)) for d, t in json.loads(data)]


RESERVED_KEY_REASON = "key starts with NUL, which esp reserves for an operator's timers"


def reserved_keys(keys: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array | None:
    """A mask of the keys in esp's reserved namespace (they would alias a key's timers), or None
    when there is none."""
    if len(keys) == 0:
        return None  # an empty column may have no type (null) at all
    reserved = pc.starts_with(keys, RESERVED_PREFIX)
    return reserved if pc.any(reserved).as_py() else None


class TimerIndex:
    """In-memory copy of one channel's timers, valid for the store version it was built at."""

    def __init__(self) -> None:
        self.version: Version | None = None
        self._timers: dict[str, tuple[int, frozenset[Timer]]] = {}

    def refresh(self, store: StateStore) -> None:
        """Rebuild from the store unless already at its version."""
        if self.version == store.version:
            return
        entries = store.entries()
        mask = pc.starts_with(entries["key"], TIMER_PREFIX)
        timers = entries.filter(mask)
        self._timers = {}
        for h, k, v in zip(timers["hash"].to_pylist(), timers["key"].to_pylist(), timers["value"].to_pylist()):
            self._timers[k[len(TIMER_PREFIX) :]] = (int(h), frozenset(decode_timers(v)))
        self.version = store.version

    def invalidate(self) -> None:
        self.version = None

    def set(self, key: str, key_hash: int, timers: Iterable[Timer]) -> None:
        kept = frozenset(timers)
        if kept:
            self._timers[key] = (key_hash, kept)
        else:
            self._timers.pop(key, None)

    def due(self, watermark_ms: int, processing_ms: int) -> list[DueTimer]:
        """Every timer the watermark or processing time has reached, in (time, key) order."""
        out = []
        for key, (key_hash, timers) in self._timers.items():
            for domain, time in timers:
                now = watermark_ms if domain == "event" else processing_ms
                if time <= now:
                    out.append(DueTimer(time, key, domain, key_hash))
        return sorted(out)

    def __len__(self) -> int:
        return sum(len(t) for _, t in self._timers.values())


def fired_table(due: Sequence[DueTimer]) -> pa.Table:
    """The `FIRED_SCHEMA` table handed to `on_timer`."""
    return pa.table(
        {
            "key": pa.array([d.key for d in due], pa.string()),
            HASH_COLUMN: pa.array(np.array([d.key_hash for d in due], dtype=np.int64)),
            "time": pa.array(np.array([d.time for d in due], dtype=np.int64)),
            "domain": pa.array([d.domain for d in due], pa.string()),
        },
        schema=FIRED_SCHEMA,
    )
