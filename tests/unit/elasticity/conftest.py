"""Factory fixtures for the elasticity unit tests: one parametrized store factory, so every
state-store implementation runs the same suite."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from elasticity.state import (
    FileHistory,
    HistoryBackend,
    HistoryStore,
    Int64Codec,
    MemoryBackend,
    MemoryHistory,
    MemoryStore,
    RocksBackend,
    RocksStore,
    StateStore,
    StoreBackend,
    ValueCodec,
)

STORE_KINDS = ["memory", "memory+files", "rocks", "history"]


@dataclass
class StoreFactory:
    """Opens a channel's store, and re-opens it as a restarted process would."""

    kind: str
    root: Path
    _memory_histories: dict[int, MemoryHistory] = field(default_factory=dict)
    _open: list[StateStore] = field(default_factory=list)

    def __call__(self, channel: int = 0, codec: ValueCodec[Any] | None = None) -> StateStore:
        codec = codec if codec is not None else Int64Codec()
        durable = str(self.root / "durable" / f"channel={channel}")
        if self.kind == "memory":
            store: StateStore = MemoryStore(channel, codec, self._memory_histories.setdefault(channel, MemoryHistory()))
        elif self.kind == "memory+files":
            store = MemoryStore(channel, codec, FileHistory.at(durable))
        elif self.kind == "history":
            store = HistoryStore(channel, codec, FileHistory.at(durable))
        else:
            store = RocksStore(channel, codec, FileHistory.at(durable), str(self.root / "local" / f"channel={channel}"))
        self._open.append(store)
        return store

    def reopen(self, store: StateStore) -> StateStore:
        store.close()
        return self(store.channel, store.codec)

    def close_all(self) -> None:
        for store in self._open:
            store.close()


@pytest.fixture(params=STORE_KINDS)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    factory = StoreFactory(request.param, tmp_path)
    yield factory
    factory.close_all()


BACKEND_KINDS = ["memory", "rocks", "history"]


def build_backend(kind: str, root: Path, codec: ValueCodec[Any] | None = None) -> StoreBackend:
    codec = codec if codec is not None else Int64Codec()
    if kind == "memory":
        return MemoryBackend(codec, durable=str(root / "durable"))
    if kind == "history":
        return HistoryBackend(codec, durable=str(root / "durable"))
    return RocksBackend(codec, durable=str(root / "durable"), local_dir=str(root / "local"))


@pytest.fixture(params=BACKEND_KINDS)
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], StoreBackend]]:
    opened: list[StoreBackend] = []

    def factory() -> StoreBackend:
        backend = build_backend(request.param, tmp_path)
        opened.append(backend)
        return backend

    yield factory
    for backend in opened:
        backend.close()
