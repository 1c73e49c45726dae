"""A RocksDB working copy's checkpoint and close find its memtables already flushed, by RocksDB's own
thread: rocksdict holds Python's GIL in every call, so a flush inside one stopped the whole Python
worker, other threads included (a seed's checkpoint runs in a thread beside the channel's task)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from elasticity.state import FileHistory, Int64Codec
from elasticity.state import rocks as rocks_module
from elasticity.state.rocks import RocksStore

# What RocksDB reports for an empty memtable (its arena's first block).
EMPTY_MEMTABLE_BYTES = 64 << 10
ENTRIES = 50_000  # ~2 MB of memtable: far below RocksDB's own flush at 64 MB


def _store(tmp_path: Path) -> RocksStore:
    return RocksStore(0, Int64Codec(), FileHistory.at(str(tmp_path / "durable")), str(tmp_path / "local"))


def _write(store: RocksStore, entries: int, batch: int = 0) -> None:
    """`entries` entries in one batch: its changelog in the history, then one write batch here, as
    a migration or a rebuild writes them."""
    with store.begin(batch) as tx:
        for i in range(entries):
            tx.put(f"key-{batch}-{i}", i)


@pytest.fixture
def checkpoint_sees(monkeypatch) -> list[int]:
    """The memtable bytes of each database RocksDB's `Checkpoint` is made of."""
    seen: list[int] = []
    real = rocks_module.Checkpoint

    def recording(db: Any) -> Any:
        seen.append(db.property_int_value("rocksdb.cur-size-all-mem-tables"))
        return real(db)

    monkeypatch.setattr(rocks_module, "Checkpoint", recording)
    return seen


def test_a_checkpoint_finds_the_memtables_flushed(tmp_path, checkpoint_sees) -> None:
    store = _store(tmp_path)
    _write(store, ENTRIES)
    assert store.memtable_bytes() > EMPTY_MEMTABLE_BYTES
    store.checkpoint(str(tmp_path / "checkpoint"))
    assert checkpoint_sees and checkpoint_sees[0] <= EMPTY_MEMTABLE_BYTES
    clone = RocksStore(0, Int64Codec(), FileHistory.at(str(tmp_path / "durable")), str(tmp_path / "checkpoint"))
    assert len(clone) == len(store) == ENTRIES
    clone.close()
    store.close()


class _RecordingDb:
    """The store's database, recording its memtable bytes when it is closed."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.memtable_at_close: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def close(self) -> None:
        self.memtable_at_close = self._db.property_int_value("rocksdb.cur-size-all-mem-tables")
        self._db.close()


def test_a_close_finds_the_memtables_flushed_and_keeps_the_entries(tmp_path) -> None:
    store = _store(tmp_path)
    _write(store, ENTRIES)
    recording = _RecordingDb(store.db)
    store._db = recording  # type: ignore[assignment]
    store.close()
    assert recording.memtable_at_close is not None and recording.memtable_at_close <= EMPTY_MEMTABLE_BYTES
    reopened = _store(tmp_path)
    assert len(reopened) == ENTRIES
    reopened.close()
