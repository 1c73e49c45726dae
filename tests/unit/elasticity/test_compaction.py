"""Snapshots written from the durable history alone (the stream driver's snapshot writer): the
same state a working set holds at that version, whatever is appended meanwhile; never into a
channel that was dropped and created again; nothing published when the fence says no."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticity.state import FileHistory, Int64Codec, MemoryHistory, RocksBackend, Version
from elasticity.state.compaction import batch_version, fold_snapshot, publish_snapshot, snapshot_from_history
from elasticity.state.records import entries_table


def _write_batches(backend: RocksBackend, channel: int, batches: range, keys: int = 30) -> None:
    store = backend.open(channel)
    for batch_id in batches:
        with store.begin(batch_id) as tx:
            for k in range(keys):
                if (k + batch_id) % 7 == 0:
                    tx.delete(f"k{k}")
                else:
                    tx.put(f"k{k}", batch_id * 100 + k)


def _state(store) -> dict[str, int]:
    return dict(store.items())


def test_a_snapshot_from_history_is_the_state_at_that_batch_while_later_batches_land(tmp_path: Path) -> None:
    durable = str(tmp_path / "durable")
    executor = RocksBackend(Int64Codec(), durable, str(tmp_path / "local"))
    _write_batches(executor, 0, range(0, 6))
    at_five = _state(executor.open(0))
    _write_batches(executor, 0, range(6, 8))  # the next batches run while the driver snapshots
    history = FileHistory.at(str(tmp_path / "durable" / "channels" / "channel=0"))

    written = snapshot_from_history(history, batch_version(history, 5), keep_snapshots=2)

    assert written is not None and written.version.batch == 5
    assert written.entries == len(at_five) and written.changelogs_folded == 6
    fresh = RocksBackend(Int64Codec(), durable, str(tmp_path / "fresh")).open(0)
    assert fresh.last_restore is not None and fresh.last_restore.snapshot_entries == len(at_five)
    assert fresh.last_restore.changelog_entries == 2 * 30  # batches 6 and 7 folded after it
    assert _state(fresh) == _state(executor.open(0))
    fresh.restore(5)
    assert _state(fresh) == at_five


def test_history_is_pruned_to_two_snapshots_and_a_lagging_copy_still_catches_up(tmp_path: Path) -> None:
    durable = str(tmp_path / "durable")
    executor = RocksBackend(Int64Codec(), durable, str(tmp_path / "local"))
    lagging = RocksBackend(Int64Codec(), durable, str(tmp_path / "lagging")).open(0)  # at batch -1
    history = FileHistory.at(str(tmp_path / "durable" / "channels" / "channel=0"))
    for last in (3, 6, 9):
        _write_batches(executor, 0, range(last - 2, last + 1) if last > 3 else range(0, 4))
        assert snapshot_from_history(history, batch_version(history, last)) is not None

    assert [v.batch for v in history.snapshot_versions()] == [6, 9]
    assert min(v.batch for v in history.changelog_versions()) == 7
    lagging.sync()
    assert _state(lagging) == _state(executor.open(0))


def test_nothing_is_written_for_a_batch_the_history_does_not_hold_or_an_older_one(tmp_path: Path) -> None:
    executor = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "local"))
    _write_batches(executor, 0, range(0, 4))
    history = FileHistory.at(str(tmp_path / "durable" / "channels" / "channel=0"))
    # A channel dropped by a rescale and created again holds other versions than the decision's.
    assert batch_version(history, 10) is None
    assert snapshot_from_history(history, Version(2, 7)) is None
    assert snapshot_from_history(history, batch_version(history, 3)) is not None
    assert snapshot_from_history(history, batch_version(history, 2)) is None  # older than the newest
    assert [v.batch for v in history.snapshot_versions()] == [3]


def test_a_deposed_driver_publishes_no_snapshot(tmp_path: Path) -> None:
    executor = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "local"))
    _write_batches(executor, 0, range(0, 3))
    history = FileHistory.at(str(tmp_path / "durable" / "channels" / "channel=0"))

    def deposed() -> None:
        raise PermissionError("lease lost")

    with pytest.raises(PermissionError):
        snapshot_from_history(history, batch_version(history, 2), before_publish=deposed)
    assert history.snapshot_versions() == []


def test_a_folded_snapshot_is_invisible_until_published_and_skipped_when_history_moved_past_it(
    tmp_path: Path,
) -> None:
    executor = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "local"))
    _write_batches(executor, 0, range(0, 4))
    _write_batches(executor, 1, range(0, 4))
    at_three = _state(executor.open(0))
    histories = [FileHistory.at(str(tmp_path / "durable" / "channels" / f"channel={c}")) for c in (0, 1)]
    folds = [fold_snapshot(h, batch_version(h, 2)) for h in histories]
    newer = fold_snapshot(histories[0], batch_version(histories[0], 3))
    assert all(f is not None for f in folds) and newer is not None
    assert all(h.snapshot_versions() == [] for h in histories)  # folding wrote nothing

    assert publish_snapshot(histories[0], newer) is not None
    executor.drop(1)  # a migration dropped channel 1 while its fold ran
    assert publish_snapshot(histories[0], folds[0]) is None  # older than the snapshot since
    assert publish_snapshot(histories[1], folds[1]) is None
    assert [v.batch for v in histories[0].snapshot_versions()] == [3]
    assert not (tmp_path / "durable" / "channels" / "channel=1").exists()
    fresh = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "fresh")).open(0)
    assert fresh.last_restore is not None and fresh.last_restore.snapshot_entries == len(at_three)
    assert _state(fresh) == at_three


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_staged_snapshot_appears_only_when_published(kind: str, tmp_path: Path) -> None:
    history = MemoryHistory() if kind == "memory" else FileHistory.at(str(tmp_path / "h"))
    entries = entries_table([1, 2], ["a", "b"], [b"1", b"2"])
    staged = history.stage_snapshot(Version(4), entries)
    assert history.snapshot_versions() == []
    staged.publish()
    assert history.snapshot_versions() == [Version(4)]
    assert history.read_snapshot(Version(4)).to_pylist() == entries.to_pylist()
