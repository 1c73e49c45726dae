"""`StateView`: an operator's window on its channel's batch transaction.

Multi-get / multi-put / delete of state values and timers, all placed by the key hashes the
runner passes through. The store underneath holds bytes (`BytesCodec`); the view encodes with
the operator's codec and, when the operator has a TTL, wraps each value in an envelope with
its last write's processing time:

    8 bytes little-endian int64 written_ms | the codec's bytes

A value whose `written_ms + ttl_ms <= processing_ms` is expired: reads return None at once, and
the internal `TTL_DOMAIN` timer registered by the write deletes it when the processing time
reaches it (so expiry is exact even if no one reads the key, and moves with the key).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar

from elasticity.operators.timers import (
    TTL_DOMAIN,
    DueTimer,
    Timer,
    TimerIndex,
    decode_timers,
    encode_timers,
    timer_key,
)
from elasticity.operators.types import TimeDomain
from elasticity.state.codecs import ValueCodec
from elasticity.state.store import Transaction

S = TypeVar("S")

_WRITTEN = struct.Struct("<q")


class StateView(Generic[S]):
    """Keyed state and timers of one channel within one batch; writes land in its transaction."""

    def __init__(
        self,
        tx: Transaction,
        codec: ValueCodec[S],
        timers: TimerIndex,
        processing_ms: int,
        ttl_ms: int | None = None,
    ) -> None:
        self._tx = tx
        self._codec = codec
        self._timers = timers
        self._now = processing_ms
        self._ttl = ttl_ms

    # ---- values ---------------------------------------------------------------------------
    def get_many(self, keys: Sequence[str], hashes: Sequence[int]) -> list[S | None]:
        """The state of each key (None if absent or expired)."""
        return [self._decode(self._tx.get(k, key_hash=int(h))) for k, h in zip(keys, hashes)]

    def get(self, key: str, key_hash: int) -> S | None:
        return self.get_many([key], [key_hash])[0]

    def put_many(self, keys: Sequence[str], hashes: Sequence[int], values: Iterable[S]) -> None:
        for key, key_hash, value in zip(keys, hashes, values):
            self._tx.put(key, self._encode(value), key_hash=int(key_hash))
            if self._ttl is not None:
                # One cleanup timer per key, moved forward by every write.
                self._replace_ttl_timer(key, int(key_hash), self._now + self._ttl)

    def put(self, key: str, key_hash: int, value: S) -> None:
        self.put_many([key], [key_hash], [value])

    def delete_many(self, keys: Sequence[str], hashes: Sequence[int]) -> None:
        for key, key_hash in zip(keys, hashes):
            self._tx.delete(key, key_hash=int(key_hash))
            if self._ttl is not None:
                self._replace_ttl_timer(key, int(key_hash), None)

    def delete(self, key: str, key_hash: int) -> None:
        self.delete_many([key], [key_hash])

    def _encode(self, value: S) -> bytes:
        data = self._codec.encode(value)
        return data if self._ttl is None else _WRITTEN.pack(self._now) + data

    def _decode(self, raw: Any) -> S | None:
        if raw is None:
            return None
        if self._ttl is None:
            return self._codec.decode(raw)
        (written,) = _WRITTEN.unpack_from(raw)
        if written + self._ttl <= self._now:
            return None
        return self._codec.decode(raw[_WRITTEN.size :])

    # ---- timers ---------------------------------------------------------------------------
    def register_timers(
        self, keys: Sequence[str], hashes: Sequence[int], times: Sequence[int], domain: TimeDomain
    ) -> None:
        """Add a timer per (key, time); registering an existing one again is a no-op."""
        for key, key_hash, time in zip(keys, hashes, times):
            current = self.timers_of(key, int(key_hash))
            self._write_timers(key, int(key_hash), [*current, (domain.value, int(time))])

    def delete_timers(
        self, keys: Sequence[str], hashes: Sequence[int], times: Sequence[int], domain: TimeDomain
    ) -> None:
        for key, key_hash, time in zip(keys, hashes, times):
            gone = (domain.value, int(time))
            current = self.timers_of(key, int(key_hash))
            self._write_timers(key, int(key_hash), [t for t in current if t != gone])

    def timers_of(self, key: str, key_hash: int) -> list[Timer]:
        """Every pending timer of a key, (domain, time) sorted; internal TTL timers included."""
        return decode_timers(self._tx.get(timer_key(key), key_hash=key_hash))

    def _write_timers(self, key: str, key_hash: int, timers: list[Timer]) -> None:
        if timers:
            self._tx.put(timer_key(key), encode_timers(timers), key_hash=key_hash)
        elif self._tx.get(timer_key(key), key_hash=key_hash) is not None:
            self._tx.delete(timer_key(key), key_hash=key_hash)
        self._timers.set(key, key_hash, timers)

    def _replace_ttl_timer(self, key: str, key_hash: int, time: int | None) -> None:
        kept = [t for t in self.timers_of(key, key_hash) if t[0] != TTL_DOMAIN]
        self._write_timers(key, key_hash, kept if time is None else [*kept, (TTL_DOMAIN, time)])

    # ---- used by the runner -----------------------------------------------------------------
    def consume(self, due: Sequence[DueTimer]) -> None:
        """Remove fired timers before their callback runs (it may register them again)."""
        for timer in due:
            current = self.timers_of(timer.key, timer.key_hash)
            self._write_timers(timer.key, timer.key_hash, [t for t in current if t != (timer.domain, timer.time)])

    def expire(self, due: Sequence[DueTimer]) -> None:
        """Delete the state of keys whose TTL timer fired, if no later write renewed it."""
        for timer in due:
            raw = self._tx.get(timer.key, key_hash=timer.key_hash)
            if raw is not None and self._decode(raw) is None:
                self._tx.delete(timer.key, key_hash=timer.key_hash)
