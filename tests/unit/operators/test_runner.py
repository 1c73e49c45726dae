"""The per-channel runner's guards: outputs must match the declared schema, a callback that
keeps a timer due forever fails the batch (and leaves nothing committed), stores must hold
bytes, a replay whose history was pruned says so instead of emitting wrong outputs, a deposed
writer makes nothing durable, and the commit's apply is timed without its durable write."""

from __future__ import annotations

import pyarrow as pa
import pytest

from elasticity.control.clock import ManualClock
from elasticity.operators import ChannelRunner, Context, Count, KeyedAggregate, KeyedOperator, StateView, TimeDomain
from elasticity.state import BytesCodec, Int64Codec, MemoryHistory, MemoryStore, StateStoreError, Version

ROWS = pa.table({"key": ["a", "b"], "value": [1.0, 2.0]})


class WrongOutput(KeyedOperator[int]):
    state_codec = Int64Codec()
    output_schema = pa.schema([("key", pa.string()), ("n", pa.int64())])

    def update(self, rows: pa.Table, state: StateView[int], ctx: Context) -> pa.Table:
        return pa.table({"something_else": [1]})


class ForeverDue(KeyedOperator[int]):
    state_codec = Int64Codec()
    output_schema = pa.schema([("key", pa.string())])

    def update(self, rows: pa.Table, state: StateView[int], ctx: Context) -> pa.Table:
        state.put_many(rows["key"].to_pylist(), rows["key_hash"].to_pylist(), [1] * rows.num_rows)
        self.on_timer(rows, state, ctx)
        return self.empty_output()

    def on_timer(self, fired: pa.Table, state: StateView[int], ctx: Context) -> pa.Table:
        keys = fired["key"].to_pylist()
        state.register_timers(keys, fired["key_hash"].to_pylist(), [0] * len(keys), TimeDomain.EVENT)
        return self.empty_output()


class SlowDurableWrites(MemoryHistory):
    """A history whose changelog write takes 10 s of the clock (a slow disk's fsync); it counts
    the writes, withdrawn ones included."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self.clock = clock
        self.changelog_writes = 0

    def write_changelog(self, version: Version, changes: pa.Table) -> None:
        self.clock.advance(10.0)
        self.changelog_writes += 1
        super().write_changelog(version, changes)


def test_the_apply_time_leaves_out_the_changelog_write() -> None:
    """The snapshot policy learns a recovery's fold rate from it, and a recovery writes nothing."""
    clock = ManualClock()
    store = MemoryStore(0, BytesCodec(), SlowDurableWrites(clock))
    result = ChannelRunner(KeyedAggregate(Count()), store, clock=clock.now).run(0, ROWS, 0, 0)
    assert store.is_committed(0) and clock.now() == 10.0
    assert result.apply_s == 0.0


class Deposed(Exception):
    """What a fence raises once another driver holds the stream's lease."""


def _deposed() -> None:
    raise Deposed


def test_a_deposed_writer_writes_no_changelog() -> None:
    """The fence runs before the durable write, not after it with a withdrawal: a task killed in
    between would leave a deposed writer's changelog for the stream's rightful owner to fold."""
    history = SlowDurableWrites(ManualClock())
    store = MemoryStore(0, BytesCodec(), history)
    with pytest.raises(Deposed):
        ChannelRunner(KeyedAggregate(Count()), store, fence=_deposed).run(0, ROWS, 0, 0)
    assert history.changelog_writes == 0
    assert not store.is_committed(0) and not store.in_transaction and len(store) == 0


def test_output_not_matching_the_declared_schema_is_a_clear_error() -> None:
    runner = ChannelRunner(WrongOutput(), MemoryStore(0, BytesCodec()))
    with pytest.raises(TypeError, match="update returned"):
        runner.run(0, ROWS, 0, 0)


def test_a_timer_due_forever_fails_the_batch_and_commits_nothing() -> None:
    store = MemoryStore(0, BytesCodec())
    with pytest.raises(RuntimeError, match="re-registers a due timer"):
        ChannelRunner(ForeverDue(), store).run(0, ROWS, 0, 0)
    assert len(store) == 0 and not store.is_committed(0) and not store.in_transaction


def test_operator_stores_hold_bytes() -> None:
    with pytest.raises(TypeError, match="BytesCodec"):
        ChannelRunner(KeyedAggregate(Count()), MemoryStore(0, Int64Codec()))


def test_replay_with_pruned_history_refuses() -> None:
    store = MemoryStore(0, BytesCodec())
    runner = ChannelRunner(KeyedAggregate(Count()), store)
    for batch_id in range(3):
        runner.run(batch_id, ROWS, 0, 0)
        store.snapshot(keep_snapshots=1)  # keeps only the newest snapshot: batch 2's past is gone
    with pytest.raises(StateStoreError):
        runner.run(2, ROWS, 0, 0)
    assert runner.run(3, ROWS, 0, 0).output.to_pylist() == [{"key": "a", "value": 4}, {"key": "b", "value": 4}]
