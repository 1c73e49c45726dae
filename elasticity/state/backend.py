"""Where a job's channel stores live: a `StoreBackend` opens the store of any channel id
(cached per process) and drops a channel that a rescale removed.

- `MemoryBackend`: in-memory working sets; history in memory, or on a durable path/URI.
- `ColumnarBackend`: in-memory columnar working sets (`ColumnarStore`), history as above.
- `RocksBackend`: RocksDB working sets under a local directory; history under
  `<durable>/channels/channel=<id>/` on any pyarrow filesystem (local path by default).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Protocol

from rocksdict import Rdict

from elasticity.hashing import hash_str
from elasticity.state.codecs import ValueCodec
from elasticity.state.columnar import ColumnarStore
from elasticity.state.files import Location
from elasticity.state.history import FileHistory, History, MemoryHistory
from elasticity.state.memory import MemoryStore
from elasticity.state.rocks import RocksStore, default_options
from elasticity.state.store import KeyHasher, StateStore


class StoreBackend(Protocol):
    """Opens per-channel stores; the migration protocol talks to state only through this."""

    def open(self, channel: int) -> StateStore: ...

    def drop(self, channel: int) -> None: ...

    def channels(self) -> list[int]: ...

    def close(self) -> None: ...


def channel_dir_name(channel: int) -> str:
    return f"channel={channel}"


def _channels_under(location: Location) -> list[int]:
    return sorted(int(n.split("=", 1)[1]) for n in location.names() if n.startswith("channel="))


class _CachingBackend:
    """Shared caching: one open store per channel per process, opened thread-safely."""

    def __init__(self) -> None:
        self._stores: dict[int, StateStore] = {}
        self._lock = threading.Lock()

    def _create(self, channel: int) -> StateStore:
        raise NotImplementedError

    def open(self, channel: int) -> StateStore:
        with self._lock:
            if channel not in self._stores:
                self._stores[channel] = self._create(channel)
            return self._stores[channel]

    def _destroy_unopened(self, channel: int) -> None:
        raise NotImplementedError

    def drop(self, channel: int) -> None:
        """Delete a channel's working set and durable history (idempotent; no restore needed)."""
        with self._lock:
            store = self._stores.pop(channel, None)
        if store is not None:
            store.destroy()
        else:
            self._destroy_unopened(channel)

    def close(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()


class MemoryBackend(_CachingBackend):
    """In-memory stores; histories in memory (default) or under `durable` (path or URI)."""

    def __init__(self, codec: ValueCodec[Any], durable: str | None = None, key_hasher: KeyHasher = hash_str) -> None:
        super().__init__()
        self.codec = codec
        self.key_hasher = key_hasher
        self._root = Location.of(durable).child("channels") if durable is not None else None
        self._histories: dict[int, MemoryHistory] = {}

    def _history(self, channel: int) -> History:
        if self._root is not None:
            return FileHistory(self._root.child(channel_dir_name(channel)))
        return self._histories.setdefault(channel, MemoryHistory())

    def _create(self, channel: int) -> StateStore:
        return MemoryStore(channel, self.codec, self._history(channel), self.key_hasher)

    def _destroy_unopened(self, channel: int) -> None:
        self._history(channel).destroy()

    def drop(self, channel: int) -> None:
        super().drop(channel)
        self._histories.pop(channel, None)

    def channels(self) -> list[int]:
        if self._root is not None:
            return _channels_under(self._root)
        return sorted(c for c, h in self._histories.items() if h.changelog_versions() or h.snapshot_versions())


class ColumnarBackend(MemoryBackend):
    """`MemoryBackend`'s histories, each channel's working set a `ColumnarStore`."""

    def _create(self, channel: int) -> StateStore:
        return ColumnarStore(channel, self.codec, self._history(channel), self.key_hasher)


class RocksBackend(_CachingBackend):
    """RocksDB stores under `local_dir`, durable history under `durable` (path or URI)."""

    def __init__(self, codec: ValueCodec[Any], durable: str, local_dir: str, key_hasher: KeyHasher = hash_str) -> None:
        super().__init__()
        self.codec = codec
        self.key_hasher = key_hasher
        self._root = Location.of(durable).child("channels")
        self.local_dir = local_dir

    def _create(self, channel: int) -> StateStore:
        os.makedirs(self.local_dir, exist_ok=True)
        return RocksStore(
            channel,
            self.codec,
            FileHistory(self._root.child(channel_dir_name(channel))),
            self._local_path(channel),
            self.key_hasher,
        )

    def _local_path(self, channel: int) -> str:
        return os.path.join(self.local_dir, channel_dir_name(channel))

    def _destroy_unopened(self, channel: int) -> None:
        if os.path.exists(self._local_path(channel)):
            Rdict.destroy(self._local_path(channel), default_options())
        FileHistory(self._root.child(channel_dir_name(channel))).destroy()

    def channels(self) -> list[int]:
        return _channels_under(self._root)
