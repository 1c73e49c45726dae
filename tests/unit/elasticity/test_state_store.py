"""One suite every StateStore implementation must pass (parametrized by `make_store`)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elasticity.hashing import hash_str
from elasticity.state import (
    BytesCodec,
    Float64Codec,
    Int64Codec,
    JsonCodec,
    StateStoreError,
    TransactionStateError,
    TxState,
    Version,
    codec_by_name,
    prune,
)
from elasticity.state.records import count_delta_of, entries_table, vacated_ranges_of
from tests.unit.elasticity.store_helpers import write_with_model


def write_batch(store, batch_id: int, puts: dict[str, int], deletes: tuple[str, ...] = ()) -> None:
    with store.begin(batch_id) as tx:
        for key, value in puts.items():
            tx.put(key, value)
        for key in deletes:
            tx.delete(key)


def test_put_get_delete_iterate(make_store) -> None:
    store = make_store()
    write_batch(store, 0, {"a": 1, "b": 2, "日本": 3})
    write_batch(store, 1, {"a": 10}, deletes=("b",))
    assert store.get("a") == 10
    assert store.get("b") is None
    assert store.get("missing") is None
    assert dict(store.items()) == {"a": 10, "日本": 3}
    assert len(store) == 2
    assert store.version == Version(1, 0)


def test_uncommitted_writes_are_invisible_and_read_your_writes_inside(make_store) -> None:
    store = make_store()
    write_batch(store, 0, {"a": 1})
    tx = store.begin(1)
    tx.put("a", 2)
    tx.delete("b")
    assert tx.get("a") == 2
    assert store.get("a") == 1
    tx.prepare()
    assert store.get("a") == 1  # prepared is durable, not yet visible
    tx.commit()
    assert store.get("a") == 2


def test_replaying_a_committed_batch_is_a_noop(make_store) -> None:
    store = make_store()
    write_batch(store, 0, {"a": 1})
    write_batch(store, 1, {"a": 2})
    tx = store.begin(1)
    assert tx.is_replay
    tx.put("a", 999)
    tx.commit()
    assert tx.state is TxState.COMPLETE
    write_batch(store, 0, {"a": 5, "z": 1})
    assert dict(store.items()) == {"a": 2}
    assert store.is_committed(1) and not store.is_committed(2)


def test_batch_ids_may_skip(make_store) -> None:
    store = make_store()
    write_batch(store, 3, {"a": 1})
    write_batch(store, 7, {"a": 2})
    assert store.version.batch == 7
    assert store.restore(5) == Version(3, 0)
    assert store.get("a") == 1


def test_transaction_state_machine_guards_transitions(make_store) -> None:
    store = make_store()
    tx = store.begin(0)
    assert tx.state is TxState.STARTED
    tx.put("a", 1)
    tx.prepare()
    assert tx.state is TxState.PREPARED
    with pytest.raises(TransactionStateError):
        tx.put("b", 2)
    with pytest.raises(TransactionStateError):
        tx.prepare()
    tx.commit()
    assert tx.state is TxState.COMPLETE
    for action in (tx.commit, tx.abort, tx.prepare):
        with pytest.raises(TransactionStateError):
            action()


def test_one_open_transaction_per_store(make_store) -> None:
    store = make_store()
    tx = store.begin(0)
    with pytest.raises(TransactionStateError):
        store.begin(1)
    tx.abort()
    assert tx.state is TxState.FAILED
    store.begin(1).abort()


def test_aborting_a_prepared_transaction_withdraws_it(make_store) -> None:
    store = make_store()
    write_batch(store, 0, {"a": 1})
    tx = store.begin(1)
    tx.put("a", 2)
    tx.prepare()
    tx.abort()
    assert tx.state is TxState.FAILED
    reopened = make_store.reopen(store)
    assert reopened.get("a") == 1
    assert reopened.version == Version(0, 0)


def test_exception_inside_context_aborts(make_store) -> None:
    store = make_store()
    with pytest.raises(RuntimeError):
        with store.begin(0) as tx:
            tx.put("a", 1)
            raise RuntimeError("operator failed")
    assert tx.state is TxState.FAILED
    assert store.get("a") is None
    write_batch(store, 0, {"a": 2})  # the batch can be retried
    assert store.get("a") == 2


def test_reopen_recovers_committed_state(make_store) -> None:
    store = make_store()
    write_batch(store, 0, {"a": 1, "b": 2})
    write_batch(store, 1, {"c": 3}, deletes=("a",))
    reopened = make_store.reopen(store)
    assert dict(reopened.items()) == {"b": 2, "c": 3}
    assert reopened.version == Version(1, 0)


def test_prepared_but_unapplied_batch_is_replayed_on_reopen(make_store) -> None:
    # A crash between prepare (durable) and commit (applied): the changelog is the truth.
    store = make_store()
    write_batch(store, 0, {"a": 1})
    tx = store.begin(1)
    tx.put("a", 2)
    tx.prepare()
    reopened = make_store.reopen(store)
    assert reopened.get("a") == 2
    assert reopened.version == Version(1, 0)
    assert reopened.begin(1).is_replay


def test_snapshot_prune_and_restore(make_store) -> None:
    store = make_store()
    expected = {}
    for batch in range(6):
        write_batch(store, batch, {f"k{batch}": batch, "shared": batch})
        expected[batch] = dict(store.items())
        if batch in (1, 3, 4):
            store.snapshot()
    for batch in range(6):
        store.restore(batch)
        assert dict(store.items()) == expected[batch]
    prune(store.history, keep_snapshots=2)
    for batch in (3, 4, 5):
        store.restore(batch)
        assert dict(store.items()) == expected[batch]
    with pytest.raises(StateStoreError):
        store.restore(1)
    store.restore()
    assert dict(store.items()) == expected[5]
    reopened = make_store.reopen(store)
    assert dict(reopened.items()) == expected[5]


def test_restore_with_discard_later_rewinds(make_store) -> None:
    store = make_store()
    write_batch(store, 0, {"a": 1})
    write_batch(store, 1, {"a": 2})
    store.restore(0, discard_later=True)
    reopened = make_store.reopen(store)
    assert reopened.get("a") == 1
    write_batch(reopened, 1, {"a": 3})
    assert reopened.get("a") == 3


def test_migration_transactions_are_idempotent_per_epoch(make_store) -> None:
    store = make_store()
    write_batch(store, 4, {"a": 1})
    with store.begin_migration(2) as tx:
        tx.put("b", 7)
    assert store.version == Version(4, 2)
    again = store.begin_migration(2)
    assert again.is_replay
    again.abort()
    write_batch(store, 5, {"c": 1})
    assert store.version == Version(5, 2)
    assert dict(make_store.reopen(store).items()) == {"a": 1, "b": 7, "c": 1}


def test_declared_bulk_moves_keep_the_count_through_commit_and_replay(make_store) -> None:
    donor, receiver = make_store(0), make_store(1)
    write_batch(donor, 0, {f"k{i}": i for i in range(10)})
    write_batch(receiver, 0, {"own": 1})
    given = [(min(hash_str(f"k{i}") for i in range(10)), 0)]
    moved = donor.entries(given)
    assert 0 < moved.num_rows < 10
    with donor.begin_migration(1) as out, receiver.begin_migration(1) as into:
        out.delete_entries(moved, present=True, vacated=given)
        assert vacated_ranges_of(out.changes()) == given
        into.put_entries(moved, absent=True)
        assert count_delta_of(out.changes()) == -moved.num_rows
        assert count_delta_of(into.changes()) == moved.num_rows
    assert (len(donor), len(receiver)) == (10 - moved.num_rows, 1 + moved.num_rows)
    assert donor.entries(given).num_rows == 0 and receiver.entries(given).equals(moved)
    # A rebuild from the durable history replays the declared records and gets the same count.
    donor.restore(), receiver.restore()
    assert (len(donor), len(receiver)) == (10 - moved.num_rows, 1 + moved.num_rows)


def test_undeclared_writes_leave_the_count_to_the_store(make_store) -> None:
    store = make_store()
    with store.begin(0) as tx:
        tx.put_entries(make_entries(["a", "b"]), absent=True)
        tx.put("a", 5)  # a single write makes the delta unknown: "a" is rewritten, not added
        assert count_delta_of(tx.changes()) is None
    with store.begin(1) as tx:
        tx.put_entries(make_entries(["b", "c"]))
        assert count_delta_of(tx.changes()) is None
    assert len(store) == 3


def make_entries(keys: list[str]):
    return entries_table([hash_str(k) for k in keys], keys, [Int64Codec().encode(1)] * len(keys))


def test_entries_filter_by_hash_ranges_and_keep_hash_order(make_store) -> None:
    store = make_store()
    keys = [f"key-{i}" for i in range(200)]
    write_batch(store, 0, {k: i for i, k in enumerate(keys)})
    hashes = sorted(hash_str(k) for k in keys)
    ranges = [(hashes[10], hashes[20]), (hashes[100], hashes[150] - 1)]
    table = store.entries(ranges)
    got = table["hash"].to_pylist()
    assert got == sorted(got)
    assert got == hashes[10:21] + hashes[100:150]
    assert store.entries()["hash"].to_pylist() == hashes


def test_caller_supplied_hash_is_used(make_store) -> None:
    store = make_store()
    with store.begin(0) as tx:
        tx.put("k", 1, key_hash=12345)
    assert store.get("k", key_hash=12345) == 1
    assert store.entries()["hash"].to_pylist() == [12345]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(
        st.lists(
            st.tuples(st.sampled_from("abcdefgh"), st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))), max_size=8
        ),
        min_size=1,
        max_size=8,
    ),
    snapshot_every=st.integers(1, 4),
)
def test_restore_at_any_version_matches_a_model(make_store, batches, snapshot_every) -> None:
    channel = hash((tuple(map(tuple, batches)), snapshot_every)) % 1_000_000  # fresh history per example
    store = make_store(channel)
    model: dict[str, int] = {}
    after: list[dict[str, int]] = []
    for batch_id, writes in enumerate(batches):
        write_with_model(store, batch_id, writes, model)
        after.append(dict(model))
        assert len(store) == len(model)  # deletes of absent keys and rewrites must not skew it
        if batch_id % snapshot_every == 0:
            store.snapshot()
    for batch_id in reversed(range(len(batches))):
        store.restore(batch_id)
        assert dict(store.items()) == after[batch_id]
        assert len(store) == len(after[batch_id])


@given(st.integers(-(2**63), 2**63 - 1))
def test_int64_codec_roundtrip(value: int) -> None:
    assert Int64Codec().decode(Int64Codec().encode(value)) == value


@given(st.floats(allow_nan=False))
def test_float64_codec_roundtrip(value: float) -> None:
    assert Float64Codec().decode(Float64Codec().encode(value)) == value


def test_float64_codec_keeps_nan() -> None:
    assert math.isnan(Float64Codec().decode(Float64Codec().encode(float("nan"))))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=10,
)


@given(json_values)
def test_json_codec_roundtrip(value) -> None:
    assert JsonCodec().decode(JsonCodec().encode(value)) == value


def test_codecs_by_name() -> None:
    for codec in (Int64Codec(), Float64Codec(), BytesCodec(), JsonCodec()):
        assert type(codec_by_name(codec.name)) is type(codec)
    with pytest.raises(ValueError):
        codec_by_name("pickle")


def test_json_struct_values_survive_reopen(make_store) -> None:
    store = make_store(codec=JsonCodec())
    window = {"start": 1000, "end": 2000, "count": 3, "sum": 4.5, "tags": ["x"]}
    with store.begin(0) as tx:
        tx.put("w", window)
    assert make_store.reopen(store).get("w") == window


def test_history_accepts_a_filesystem_uri(tmp_path) -> None:
    from elasticity.state import FileHistory, MemoryStore, RocksStore

    uri = f"file://{tmp_path}/durable"
    store = RocksStore(0, Int64Codec(), FileHistory.at(uri), str(tmp_path / "local"))
    write_batch(store, 0, {"a": 1})
    store.snapshot()
    write_batch(store, 1, {"b": 2})
    store.close()
    assert (tmp_path / "durable" / "snapshot").is_dir()
    assert dict(MemoryStore(0, Int64Codec(), FileHistory.at(uri)).items()) == {"a": 1, "b": 2}


def test_rocks_trusts_a_declared_count_without_reading_the_keys(tmp_path, monkeypatch) -> None:
    from elasticity.state import RocksBackend
    from elasticity.state.rocks import RocksStore

    store = RocksBackend(Int64Codec(), durable=str(tmp_path / "d"), local_dir=str(tmp_path / "l")).open(0)
    write_batch(store, 0, {"x": 1})
    reads: list[int] = []
    monkeypatch.setattr(RocksStore, "_count_change", lambda self, final, count: reads.append(len(final)) or 0)
    with store.begin_migration(1) as tx:
        tx.put_entries(make_entries([f"m{i}" for i in range(50)]), absent=True)
    assert reads == [] and len(store) == 51
    write_batch(store, 1, {"y": 1})
    assert reads == [1]


def test_rocks_empties_a_vacated_range_with_one_range_delete(tmp_path) -> None:
    from elasticity.state import RocksBackend

    store = RocksBackend(Int64Codec(), durable=str(tmp_path / "d"), local_dir=str(tmp_path / "l")).open(0)
    write_batch(store, 0, {f"k{i}": i for i in range(20)})
    hashes = sorted(hash_str(f"k{i}") for i in range(20))
    vacated = [(hashes[5], hashes[9]), (hashes[15], (1 << 63) - 1)]
    listed = store.entries([(hashes[5], hashes[8]), (hashes[15], (1 << 63) - 1)])  # k at hashes[9] unlisted
    with store.begin_migration(1) as tx:
        tx.delete_entries(listed, present=True, vacated=vacated)
    # The ranges went as a whole: the declared promise is what the store trusts.
    assert store.entries(vacated).num_rows == 0
    assert store.entries()["hash"].to_pylist() == hashes[:5] + hashes[10:15]


def test_a_deletion_outside_declared_ranges_drops_the_declaration(make_store) -> None:
    store = make_store()
    write_batch(store, 0, {"a": 1, "b": 2})
    with store.begin_migration(1) as tx:
        tx.delete_entries(
            store.entries([(hash_str("a"), hash_str("a"))]), present=True, vacated=[(hash_str("a"), hash_str("a"))]
        )
        tx.delete("b")
        assert vacated_ranges_of(tx.changes()) is None
    assert dict(store.items()) == {}


def test_a_rocks_working_copy_writes_no_write_ahead_log(tmp_path) -> None:
    """The durable history is written before any change reaches a working copy: a log of it in
    RocksDB too is a second copy no one reads (39 MB for a new channel of 2M keys)."""
    from elasticity.state import RocksBackend

    local = tmp_path / "l"
    store = RocksBackend(Int64Codec(), durable=str(tmp_path / "d"), local_dir=str(local)).open(0)
    write_batch(store, 0, {f"k{i}": i for i in range(2000)})
    assert len(store) == 2000
    logs = list(local.rglob("*.log"))
    assert logs and sum(log.stat().st_size for log in logs) == 0


_KILLED_WRITER = """
import os, signal, sys
from elasticity.state import Int64Codec, RocksBackend
store = RocksBackend(Int64Codec(), durable=sys.argv[1], local_dir=sys.argv[2]).open(0)
for batch in range(3):
    with store.begin(batch) as tx:
        for i in range(500):
            tx.put(f"k{i}", batch * 1000 + i)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_rocks_working_copy_killed_before_any_flush_comes_back_from_the_history(tmp_path) -> None:
    """Without a write-ahead log, a working copy SIGKILLed before a flush reopens without its last
    writes (version and entries alike) and `sync()` replays them from the durable history."""
    import subprocess
    import sys

    from elasticity.state import RocksBackend

    durable, local = str(tmp_path / "d"), str(tmp_path / "l")
    killed = subprocess.run([sys.executable, "-c", _KILLED_WRITER, durable, local], check=False)
    assert killed.returncode == -9
    store = RocksBackend(Int64Codec(), durable=durable, local_dir=local).open(0)
    # Nothing had been flushed, so the copy came back empty and was rebuilt from the history.
    assert store.last_restore is not None
    assert store.version.batch == 2
    assert dict(store.items()) == {f"k{i}": 2000 + i for i in range(500)} and len(store) == 500
