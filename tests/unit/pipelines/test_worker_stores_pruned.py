"""A worker whose history files vanish between listing and reading (the driver pruned them while
it wrote a snapshot) rebuilds the channel from the newest snapshot instead of failing the task."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticity.state import FileHistory, Int64Codec, Location, RocksBackend
from elasticity.state.compaction import batch_version, snapshot_from_history
from pipelines.elastic_stage import StageSpec, WorkerStores


def _history_with_snapshot(tmp_path: Path) -> tuple[str, dict[str, int]]:
    durable = str(tmp_path / "durable")
    Location.of(durable).ensure()
    writer = RocksBackend(Int64Codec(), durable, str(tmp_path / "writer")).open(0)
    for batch_id in range(6):
        with writer.begin(batch_id) as tx:
            tx.put(f"k{batch_id % 3}", batch_id)
    history = FileHistory.at(f"{durable}/channels/channel=0")
    snapshot_from_history(history, batch_version(history, 3))
    # Worker stores hold the bytes an operator's codec wrote (here: int64 counts).
    return durable, {key: Int64Codec().encode(value) for key, value in writer.items()}


def _vanishing_once(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The next changelog read finds its file gone, as after a prune."""
    real = FileHistory.read_changelog
    misses: list[int] = []

    def read(self, version):
        if not misses:
            misses.append(version.batch)
            raise FileNotFoundError(f"changelog {version} was pruned")
        return real(self, version)

    monkeypatch.setattr(FileHistory, "read_changelog", read)
    return misses


def test_a_fresh_working_set_whose_changelog_vanishes_is_opened_again(tmp_path, monkeypatch) -> None:
    durable, expected = _history_with_snapshot(tmp_path)
    stores = WorkerStores(StageSpec("s", durable, str(tmp_path / "local")))
    misses = _vanishing_once(monkeypatch)

    store = stores.store_for(0, 1, frozenset(), frozenset({0}))

    assert misses and dict(store.items()) == expected


def test_a_lagging_working_set_whose_changelog_vanishes_is_rebuilt(tmp_path, monkeypatch) -> None:
    durable, expected = _history_with_snapshot(tmp_path)
    stores = WorkerStores(StageSpec("s", durable, str(tmp_path / "local")))
    lagging = stores.store_for(0, 1, frozenset(), frozenset({0}))
    writer = RocksBackend(Int64Codec(), durable, str(tmp_path / "writer2")).open(0)
    with writer.begin(6) as tx:  # another worker ran the next batch
        tx.put("k9", 9)
    misses = _vanishing_once(monkeypatch)

    store = stores.store_for(0, 1, frozenset(), frozenset({0}))

    assert misses and store is not lagging
    assert dict(store.items()) == {**expected, "k9": Int64Codec().encode(9)}
