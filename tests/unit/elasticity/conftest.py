"""Factory fixtures for the elasticity unit tests: one parametrized store factory and one
parametrized backend factory, so every state-store implementation runs the same suite.

The production kinds come from the registry (`elasticity.state.kinds.STORE_KINDS`): a kind
added there runs here without a change. `TEST_ONLY_STORE_KINDS` adds what no stream selects:
an in-memory store over an in-memory history, and the driver's history-only store.
"""

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
    MemoryHistory,
    MemoryStore,
    StateStore,
    StoreBackend,
    ValueCodec,
)
from elasticity.state.kinds import STORE_KINDS

VOLATILE_MEMORY = "volatile-memory"
"""Test-only: a `MemoryStore` over a `MemoryHistory` (nothing on files)."""
HISTORY = "history"
"""Test-only as a kind: the driver's `HistoryStore`/`HistoryBackend`, no working set of its own."""

TEST_ONLY_STORE_KINDS = [VOLATILE_MEMORY, HISTORY]
ALL_STORE_KINDS = [*STORE_KINDS, *TEST_ONLY_STORE_KINDS]
ALL_BACKEND_KINDS = [*STORE_KINDS, HISTORY]


@dataclass
class StoreFactory:
    """Opens a channel's store, and re-opens it as a restarted process would."""

    kind: str
    root: Path
    _memory_histories: dict[int, MemoryHistory] = field(default_factory=dict)
    _open: list[StateStore] = field(default_factory=list)

    def __call__(self, channel: int = 0, codec: ValueCodec[Any] | None = None) -> StateStore:
        codec = codec if codec is not None else Int64Codec()
        if self.kind == VOLATILE_MEMORY:
            store: StateStore = MemoryStore(channel, codec, self._memory_histories.setdefault(channel, MemoryHistory()))
        elif self.kind == HISTORY:
            store = HistoryStore(channel, codec, FileHistory.at(str(self.root / "durable" / f"channel={channel}")))
        else:  # a fresh backend per call: a re-opened store starts from its durable history
            store = build_backend(self.kind, self.root, codec).open(channel)
        self._open.append(store)
        return store

    def reopen(self, store: StateStore) -> StateStore:
        store.close()
        return self(store.channel, store.codec)

    def close_all(self) -> None:
        for store in self._open:
            store.close()


@pytest.fixture(params=ALL_STORE_KINDS)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    factory = StoreFactory(request.param, tmp_path)
    yield factory
    factory.close_all()


def build_backend(kind: str, root: Path, codec: ValueCodec[Any] | None = None) -> StoreBackend:
    """A registered kind's backend (or the test-only history one) over `root/durable`, `root/local`."""
    codec = codec if codec is not None else Int64Codec()
    if kind == HISTORY:
        return HistoryBackend(codec, durable=str(root / "durable"))
    return STORE_KINDS[kind].build(codec, str(root / "durable"), str(root / "local"))


@pytest.fixture(params=ALL_BACKEND_KINDS)
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], StoreBackend]]:
    opened: list[StoreBackend] = []

    def factory() -> StoreBackend:
        backend = build_backend(request.param, tmp_path)
        opened.append(backend)
        return backend

    yield factory
    for backend in opened:
        backend.close()
