"""The history-only store as a migration driver uses it: executors keep live RocksDB working
sets, the driver migrates through the durable history alone, executors catch up by sync()."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticity.hashing import hash_str
from elasticity.layout import Layout
from elasticity.migration import LayoutRegistry, Migrator
from elasticity.state import HistoryBackend, Int64Codec, Location, RocksBackend, fold_entries
from elasticity.state.records import entries_table
from tests.unit.elasticity.migration_helpers import assert_owned_exactly_once, populate


def _rows(table: pa.Table) -> list[tuple[int, str, bytes | None]]:
    return list(zip(table["hash"].to_pylist(), table["key"].to_pylist(), table["value"].to_pylist()))


def test_fold_keeps_the_last_write_and_drops_deletions() -> None:
    first = entries_table([5, 1, 5], ["b", "a", "c"], [b"1", b"2", b"3"])
    second = entries_table([5, 1], ["b", "a"], [None, b"9"])
    third = entries_table([5], ["b"], [b"7"])
    assert _rows(fold_entries([first, second])) == [(1, "a", b"9"), (5, "c", b"3")]
    assert _rows(fold_entries([first, second, third])) == [(1, "a", b"9"), (5, "b", b"7"), (5, "c", b"3")]
    assert fold_entries([]).num_rows == 0


_WRITES = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", "c"]), st.one_of(st.none(), st.binary(max_size=2))),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_WRITES, max_size=4))
def test_fold_equals_replaying_every_write_in_order(changelogs) -> None:
    # Four hashes and three keys: two keys often share a hash, and a one-row or already
    # hash-ordered file takes the fold's no-sort path.
    model: dict[tuple[int, str], bytes] = {}
    for changelog in changelogs:
        for hash_, key, value in changelog:
            if value is None:
                model.pop((hash_, key), None)
            else:
                model[(hash_, key)] = value
    tables = [entries_table([h for h, _, _ in c], [k for _, k, _ in c], [v for _, _, v in c]) for c in changelogs]
    assert _rows(fold_entries(tables)) == [(h, k, v) for (h, k), v in sorted(model.items())]


def test_reopening_sees_batches_other_processes_wrote(tmp_path: Path) -> None:
    durable = str(tmp_path / "durable")
    driver = HistoryBackend(Int64Codec(), durable)
    executor = RocksBackend(Int64Codec(), durable, str(tmp_path / "local"))
    with executor.open(0).begin(0) as tx:
        tx.put("a", 1)
    assert driver.open(0).get("a") == 1
    with executor.open(0).begin(1) as tx:
        tx.put("a", 2)
    # A stale cached version would order the next migration record before batch 1.
    assert driver.open(0).get("a") == 2
    assert driver.open(0).version == executor.open(0).version
    executor.close()


def test_driver_migrates_through_history_and_executors_catch_up(tmp_path: Path) -> None:
    durable = str(tmp_path / "durable")
    old = LayoutRegistry(Location.of(durable)).initialize(Layout.uniform(4))
    executor = RocksBackend(Int64Codec(), durable, str(tmp_path / "local"))
    expected = populate(executor, old, 600, batches=3)
    for channel in old.channels:
        executor.open(channel).snapshot()  # the driver must combine a snapshot and changelogs
    with executor.open(0).begin(3) as tx:
        moved_key = next(k for k in expected if old.owner(hash_str(k)) == 0)
        tx.put(moved_key, -5)
    expected[moved_key] = -5

    new = old.scale_out(1)
    report = Migrator(durable, HistoryBackend(Int64Codec(), durable), count_keys=False).migrate(new)
    assert report.keys_moved > 0

    for channel in old.channels:
        executor.open(channel).sync()  # what the next batch's task does
    assert_owned_exactly_once(executor, durable, expected)
    assert_owned_exactly_once(HistoryBackend(Int64Codec(), durable), durable, expected)
    executor.close()
