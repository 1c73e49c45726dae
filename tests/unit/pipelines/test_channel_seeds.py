"""Seeds: a channel one Python worker rebuilt from the durable history is cloned, not rebuilt, by
the host's other workers, and a clone catches up to the newest batch like any working copy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from elasticity.state import FileHistory, Int64Codec, Location, RocksBackend, RocksStore
from pipelines import channel_seeds, elastic_stage
from pipelines.channel_seeds import ChannelSeeds
from pipelines.elastic_stage import StageSpec, WorkerStores

EPOCH = 1


def _durable(tmp_path: Path, keys: int = 2_000) -> tuple[str, RocksStore]:
    durable = str(tmp_path / "durable")
    Location.of(durable).ensure()
    writer = RocksBackend(Int64Codec(), durable, str(tmp_path / "writer")).open(0)
    with writer.begin(0) as tx:
        for i in range(keys):
            tx.put(f"k{i}", i)
    assert isinstance(writer, RocksStore)
    return durable, writer


def _worker(durable: str, local: Path, monkeypatch: pytest.MonkeyPatch, pid: int) -> WorkerStores:
    """A worker of process `pid` (a live process: other workers' sweeps keep live workers' copies)."""
    monkeypatch.setattr(elastic_stage.os, "getpid", lambda: pid)
    return WorkerStores(StageSpec("s", durable, str(local)))


def _contents(store) -> dict[str, bytes]:
    """A store's entries as the bytes a worker's store holds (the writer's values are int64)."""
    if store.codec.__class__ is Int64Codec:
        return {key: Int64Codec().encode(value) for key, value in store.items()}
    return dict(store.items())


def _planted(stores: WorkerStores, channel: int) -> None:
    store = stores.cached[channel].store
    assert stores.seeds is not None and isinstance(store, RocksStore)
    stores.seeds.wait(store)


def test_a_second_worker_clones_the_first_ones_rebuild_and_catches_up(tmp_path, monkeypatch) -> None:
    durable, writer = _durable(tmp_path)
    first = _worker(durable, tmp_path / "local", monkeypatch, os.getpid())
    rebuilt = first.store_for(0, EPOCH, frozenset(), frozenset({0}))
    assert rebuilt.last_restore is not None
    _planted(first, 0)
    assert first.seeds is not None and first.seeds.seed_of(EPOCH, 0).is_dir()
    with writer.begin(1) as tx:  # a batch the seed does not hold
        tx.put("late", 7)

    second = _worker(durable, tmp_path / "local", monkeypatch, os.getppid())
    cloned = second.store_for(0, EPOCH, frozenset(), frozenset({0}))

    assert cloned.last_restore is None  # cloned and synced, not rebuilt from the history
    assert _contents(cloned) == _contents(writer)
    assert cloned.is_committed(1)


def test_a_seed_of_another_epoch_is_swept_not_used(tmp_path, monkeypatch) -> None:
    durable, writer = _durable(tmp_path, keys=50)
    first = _worker(durable, tmp_path / "local", monkeypatch, os.getpid())
    first.store_for(0, EPOCH, frozenset(), frozenset({0}))
    _planted(first, 0)

    second = _worker(durable, tmp_path / "local", monkeypatch, os.getppid())
    store = second.store_for(0, EPOCH + 2, frozenset(), frozenset({0}))

    assert store.last_restore is not None and _contents(store) == _contents(writer)
    assert second.seeds is not None and not second.seeds.seed_of(EPOCH, 0).exists()


def test_a_broken_seed_is_dropped_and_the_channel_rebuilt_from_the_history(tmp_path, monkeypatch) -> None:
    durable, writer = _durable(tmp_path, keys=50)
    seeds = ChannelSeeds(str(tmp_path / "local"))
    broken = seeds.seed_of(EPOCH, 0)
    broken.mkdir(parents=True)
    (broken / "CURRENT").write_text("MANIFEST-999999\n")  # names a manifest that is not there

    worker = _worker(durable, tmp_path / "local", monkeypatch, os.getpid())
    store = worker.store_for(0, EPOCH, frozenset(), frozenset({0}))

    assert store.last_restore is not None and _contents(store) == _contents(writer)


def test_a_seed_is_a_checkpoint_its_worker_keeps_writing_past(tmp_path) -> None:
    durable, writer = _durable(tmp_path, keys=50)
    seeds = ChannelSeeds(str(tmp_path / "local"))
    seeds.plant(writer, EPOCH)
    seeds.wait(writer)
    with writer.begin(1) as tx:
        tx.put("after", 1)
    clone = tmp_path / "clone"
    assert seeds.clone(EPOCH, 0, str(clone))
    history = FileHistory.at(f"{durable}/channels/channel=0")
    copy = RocksStore(0, Int64Codec(), history, str(clone))
    try:
        assert _contents(copy) == _contents(writer)  # the seed's batch 0, then batch 1 replayed
    finally:
        copy.close()


def test_a_restarted_executor_rebuilds_from_the_history_and_sweeps_dead_daemons_seeds(tmp_path, monkeypatch) -> None:
    durable, writer = _durable(tmp_path, keys=50)
    first = _worker(durable, tmp_path / "local", monkeypatch, os.getpid())
    first.store_for(0, EPOCH, frozenset(), frozenset({0}))
    _planted(first, 0)
    dead_daemon = tmp_path / "local" / "seeds" / "p999999999"
    dead_daemon.mkdir()

    # A worker of another daemon (a restarted stream's executor) does not use the seed. Both
    # stand-ins are live processes: this test's and its parent.
    this, parent = os.getpid(), os.getppid()
    monkeypatch.setattr(channel_seeds.os, "getppid", lambda: this)
    restarted = _worker(durable, tmp_path / "local", monkeypatch, parent)
    store = restarted.store_for(0, EPOCH, frozenset(), frozenset({0}))

    assert store.last_restore is not None and _contents(store) == _contents(writer)
    assert not dead_daemon.exists()


def test_a_worker_behind_by_an_epoch_clones_the_copy_another_worker_carried_into_it(tmp_path, monkeypatch) -> None:
    durable, writer = _durable(tmp_path, keys=200)
    this, parent = os.getpid(), os.getppid()  # two live processes stand for two workers
    first = _worker(durable, tmp_path / "local", monkeypatch, this)
    own = first.store_for(0, EPOCH, frozenset(), frozenset({0}))
    _planted(first, 0)
    second = _worker(durable, tmp_path / "local", monkeypatch, parent)
    behind = second.store_for(0, EPOCH, frozenset(), frozenset({0}))
    with writer.begin(1) as tx:  # stands for the next epoch's migration: many keys arrive
        for i in range(500):
            tx.put(f"in{i}", i)

    monkeypatch.setattr(elastic_stage.os, "getpid", lambda: this)
    carried = first.store_for(0, EPOCH + 1, frozenset({0}), frozenset({0}))
    _planted(first, 0)
    monkeypatch.setattr(elastic_stage.os, "getpid", lambda: parent)
    clone = second.store_for(0, EPOCH + 1, frozenset({0}), frozenset({0}))

    assert carried is own  # the first worker applied the new batch to its own copy
    assert clone is not behind and f"{os.sep}e{EPOCH + 1}{os.sep}" in clone.local_path
    assert clone.last_restore is None and _contents(clone) == _contents(writer)
