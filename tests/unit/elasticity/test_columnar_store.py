"""The columnar store against a dict model: random batches, migrations and range scans, with the
merge thresholds made tiny so that both paths (overlay and vectorized merge) run, and with a
key hasher that gives distinct keys the same hash. The shared suite (`test_state_store`) runs
the kind as registered; these cases reach the merge's corner cases it does not."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticity.hashing import hash_str
from elasticity.state import ColumnarStore, Int64Codec, MemoryHistory
from elasticity.state import columnar as columnar_module
from tests.unit.elasticity.store_helpers import write_with_model


def _colliding_hash(key: str) -> int:
    """Few distinct hashes, the extremes of int64 among them: many keys share one."""
    return [-(1 << 63), -5, 0, 7, (1 << 63) - 1][hash_str(key) % 5]


KEYS = st.sampled_from([f"k{i}" for i in range(24)])
WRITE = st.tuples(KEYS, st.one_of(st.none(), st.integers(-5, 5)))
BATCH = st.lists(WRITE, max_size=12)
RANGE = st.tuples(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-(1 << 63), (1 << 63) - 1)).map(sorted)


HASHERS = pytest.mark.parametrize("key_hasher", [hash_str, _colliding_hash], ids=["xxhash", "colliding"])
THRESHOLDS = pytest.mark.parametrize("merge_often", [True, False], ids=["merge-often", "production-thresholds"])


@contextmanager
def _thresholds(merge_often: bool) -> Iterator[None]:
    """Tiny merge thresholds, so that a few keys already take the vectorized merge."""
    with pytest.MonkeyPatch.context() as patch:
        if merge_often:
            patch.setattr(columnar_module, "MIN_MERGE_ROWS", 2)
            patch.setattr(columnar_module, "MERGE_FRACTION", 0.0)
        yield


@HASHERS
@THRESHOLDS
@settings(max_examples=60, deadline=None)
@given(batches=st.lists(BATCH, max_size=8), scans=st.lists(RANGE, max_size=3))
def test_batches_and_scans_agree_with_a_dict(key_hasher, merge_often, batches, scans) -> None:
    with _thresholds(merge_often):
        _check_batches_and_scans(key_hasher, batches, scans)


def _check_batches_and_scans(key_hasher, batches, scans) -> None:
    history = MemoryHistory()
    store = ColumnarStore(0, Int64Codec(), history, key_hasher)
    model: dict[str, int] = {}
    for batch_id, writes in enumerate(batches):
        write_with_model(store, batch_id, writes, model)
        assert len(store) == len(model)
        assert {k: store.get(k) for k in model} == model
    assert dict(store.items()) == model
    entries = store.entries()
    assert [(h, k) for h, k in zip(entries["hash"].to_pylist(), entries["key"].to_pylist())] == sorted(
        (key_hasher(k), k) for k in model
    )
    for start, end in scans:
        assert sorted(store.entries([(start, end)])["key"].to_pylist()) == sorted(
            k for k in model if start <= key_hasher(k) <= end
        )
    rebuilt = ColumnarStore(0, Int64Codec(), history, key_hasher)
    assert dict(rebuilt.items()) == model and len(rebuilt) == len(model)


@HASHERS
@THRESHOLDS
@settings(max_examples=40, deadline=None)
@given(start=st.sampled_from(range(24)), own=BATCH)
def test_a_migration_moves_a_range_between_stores(key_hasher, merge_often, start, own) -> None:
    with _thresholds(merge_often):
        _check_migration(key_hasher, start, own)


def _check_migration(key_hasher, start, own) -> None:
    donor = ColumnarStore(0, Int64Codec(), MemoryHistory(), key_hasher)
    receiver = ColumnarStore(1, Int64Codec(), MemoryHistory(), key_hasher)
    with donor.begin(0) as tx:
        for i in range(24):
            tx.put(f"k{i}", i)
    given_range = [(min(key_hasher(f"k{start}"), 0), max(key_hasher(f"k{start}"), 0))]
    moved = donor.entries(given_range)
    with receiver.begin(0) as tx:  # the receiver's own keys lie outside the range it receives
        for key, value in own:
            low, high = given_range[0]
            if not low <= key_hasher(f"own-{key}") <= high:
                tx.put(f"own-{key}", 0 if value is None else value)
    own_count = len(receiver)
    with donor.begin_migration(1) as out, receiver.begin_migration(1) as into:
        out.delete_entries(moved, present=True, vacated=given_range)
        into.put_entries(moved, absent=True)
    assert len(donor) + moved.num_rows == 24 and len(receiver) == own_count + moved.num_rows
    assert donor.entries(given_range).num_rows == 0
    assert receiver.entries(given_range).equals(moved)
    # And back: the donor takes the emptied range in again.
    with receiver.begin_migration(2) as out, donor.begin_migration(2) as into:
        out.delete_entries(moved, present=True, vacated=given_range)
        into.put_entries(moved, absent=True)
    assert dict(donor.items()) == {f"k{i}": i for i in range(24)} and len(donor) == 24
    assert len(receiver) == own_count


def test_a_donation_hides_its_ranges_without_copying_the_base() -> None:
    store = ColumnarStore(0, Int64Codec())
    with store.begin(0) as tx:
        for i in range(10_000):
            tx.put(f"w{i}", i)
    base = store.entries()
    lower_half = [(-(1 << 63), 0)]
    donated = store.entries(lower_half)
    with store.begin_migration(1) as tx:
        tx.delete_entries(donated, present=True, vacated=lower_half)
    assert store._base is base  # noqa: SLF001 (the point: no copy until the next merge)
    assert len(store) == 10_000 - donated.num_rows
    assert all(store.get(k) is None for k in donated["key"].to_pylist()[:50])
    assert store.entries().num_rows == len(store) and store.entries(lower_half).num_rows == 0


def test_a_large_rebuild_and_a_large_migration_make_no_per_key_call(monkeypatch) -> None:
    history = MemoryHistory()
    writer = ColumnarStore(0, Int64Codec(), history)
    with writer.begin(0) as tx:
        for i in range(20_000):
            tx.put(f"w{i}", i)
    writer.snapshot()
    incoming = ColumnarStore(9, Int64Codec())
    with incoming.begin(0) as tx:
        for i in range(5_000):
            tx.put(f"x{i}", i)
    moved = incoming.entries()

    def per_key(*_args: object) -> None:
        raise AssertionError("a per-key write on a path that should be one vectorized merge")

    monkeypatch.setattr(ColumnarStore, "_write_overlay", per_key)
    rebuilt = ColumnarStore(0, Int64Codec(), history)  # from the snapshot
    with rebuilt.begin_migration(1) as into:  # 5,000 received keys: a quarter of the base
        into.put_entries(moved, absent=True)
    assert len(rebuilt) == 25_000
    assert rebuilt.get("w19999") == 19_999 and rebuilt.get("x4999") == 4_999


@pytest.mark.parametrize("merge_often", [True, False], ids=["merge", "overlay"])
def test_a_commit_that_fails_leaves_the_working_set_as_it_was(merge_often, monkeypatch) -> None:
    store = ColumnarStore(0, Int64Codec())
    with store.begin(0) as tx:
        for i in range(100):
            tx.put(f"w{i}", i)
    lower_half = [(-(1 << 63), 0)]
    donated = store.entries(lower_half)
    with _thresholds(merge_often), store.begin(1) as tx:  # one change, left in the overlay
        tx.put("solo", 5)

    def broken(*_args: object, **_kwargs: object) -> None:
        raise MemoryError("no room for the merged columns")

    lookups = iter([ColumnarStore._base_value])  # the overlay path: its second lookup fails

    def second_lookup_fails(self: ColumnarStore, key_hash: int, key: str) -> bytes | None:
        return next(lookups, broken)(self, key_hash, key)

    with _thresholds(merge_often):
        monkeypatch.setattr(columnar_module, "_merge_sorted", broken)
        monkeypatch.setattr(columnar_module, "_sorted_unique", broken)
        monkeypatch.setattr(ColumnarStore, "_base_value", second_lookup_fails)
        with pytest.raises(MemoryError):
            with store.begin_migration(1) as tx:
                tx.delete_entries(donated, present=True, vacated=lower_half)
                tx.put("new", 1)
                tx.delete("w1")
    monkeypatch.undo()
    assert store.version.migration == 0 and len(store) == 101
    assert store.get("solo") == 5 and store.get("w1") == 1 and store.get("new") is None
    assert dict(store.items()) == {**{f"w{i}": i for i in range(100)}, "solo": 5}
