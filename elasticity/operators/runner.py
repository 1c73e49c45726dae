"""Runs a `KeyedOperator` on one channel for one micro-batch: the piece the Spark task (later)
and the in-process harness share.

Order within a batch: `update` on the batch's rows, then every timer the watermark / processing
time has reached, in (time, key) order, in rounds until none is due (a callback may register a
timer that is already due). Expired-TTL state is deleted in the same rounds. All of it is one
batch transaction of the channel's store: state, timers and TTL move together or not at all.

Replay contract (a batch id the store already committed, e.g. Spark re-running the last batch
after a crash after our commit): the transaction is a no-op and the outputs are *recomputed*:
the channel's state as of just before the batch is rebuilt from its durable history into a
scratch in-memory store and the operator runs again on it, its writes discarded. So outputs of
a batch are a function of (rows, state before, context) only; that is why `update`/`on_timer`
must be deterministic and why the context's watermark and processing time must be the batch's
recorded ones (Spark's offset log keeps both), not the clock's. Nothing extra is stored per batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from elasticity.hashing import hash_strings
from elasticity.operators.api import HASH_COLUMN, Context, KeyedOperator, require_schema
from elasticity.operators.timers import RESERVED_KEY_REASON, TTL_DOMAIN, TimerIndex, fired_table, reserved_keys
from elasticity.operators.view import StateView
from elasticity.state.codecs import BytesCodec
from elasticity.state.memory import MemoryStore
from elasticity.state.records import INITIAL_VERSION
from elasticity.state.store import StateStore, Transaction, TxState

S = TypeVar("S")

MAX_TIMER_ROUNDS = 1000
"""A callback re-registering an already-due timer forever would hang the batch; fail instead."""


@dataclass(frozen=True)
class ChannelResult:
    """What one channel produced for one batch."""

    output: pa.Table
    rejected: pa.Table
    replayed: bool
    apply_s: float | None = None
    """Time the commit spent applying the batch to the working set, after its changelog was made
    durable (None: a replay, nothing applied). The snapshot policy learns its fold rate from it."""


def with_hashes(rows: pa.Table, key_column: str) -> pa.Table:
    """`rows` with the `key_hash` column (Spark's xxhash64 of the key) if it lacks one."""
    if HASH_COLUMN in rows.column_names:
        return rows
    keys = rows[key_column].to_pylist()
    return rows.append_column(HASH_COLUMN, pa.array(hash_strings(keys, len(keys)), pa.int64()))


class ChannelRunner(Generic[S]):
    """One operator on one channel's store; keep one per channel per process (its timer index)."""

    def __init__(
        self,
        operator: KeyedOperator[S],
        store: StateStore,
        fence: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`fence` raises when this process may no longer write the stream (a deposed driver's
        task); it is checked after the batch's work, before its commit. `clock` times the apply."""
        if not isinstance(store.codec, BytesCodec):
            raise TypeError("an operator's channel store holds bytes (BytesCodec); the operator's codec encodes")
        if not operator.uses_timers and operator.ttl_ms is not None:
            raise TypeError(f"{type(operator).__name__} has a TTL, which needs timers: uses_timers must be True")
        self.operator = operator
        self.store = store
        self.fence = fence
        self.clock = clock
        self.timers = TimerIndex()

    def run(self, batch_id: int, rows: pa.Table, watermark_ms: int, processing_ms: int) -> ChannelResult:
        """Process the channel's rows of `batch_id` and commit, or recompute a committed batch's outputs."""
        rows = with_hashes(rows, self.operator.key_column)
        ctx = Context(batch_id, watermark_ms, processing_ms, self.store.channel)
        if self.operator.uses_timers and (reserved := reserved_keys(rows[self.operator.key_column])) is not None:
            # A poison key must not stop the stream: its rows are rejected (kept, with the reason).
            ctx.reject(rows.filter(reserved), RESERVED_KEY_REASON)
            rows = rows.filter(pc.invert(reserved))
        if self.store.is_committed(batch_id):
            return self._recompute(rows, ctx)
        if self.operator.uses_timers:
            self.timers.refresh(self.store)
        tx = self.store.begin(batch_id)
        try:
            output = process(self.operator, tx, self.timers, rows, ctx)
            if self.fence is not None:
                self.fence()
            tx.prepare()
            # Only the apply is timed: a recovery folds changelogs without writing them, and a
            # small batch's durable write (a file and its fsync) would make the fold look slow.
            applying = self.clock()
            tx.commit()
            apply_s = self.clock() - applying
        except BaseException:
            if tx.state in (TxState.STARTED, TxState.PREPARED):
                tx.abort()
            self.timers.invalidate()  # it saw writes that were not committed
            raise
        self.timers.version = self.store.version
        return ChannelResult(output, _rejected(ctx), replayed=False, apply_s=apply_s)

    def _recompute(self, rows: pa.Table, ctx: Context) -> ChannelResult:
        scratch = state_before(self.store, ctx.batch_id)
        timers = TimerIndex()
        if self.operator.uses_timers:
            timers.refresh(scratch)
        tx = scratch.begin(ctx.batch_id)
        try:
            output = process(self.operator, tx, timers, rows, ctx)
        finally:
            tx.abort()  # the committed attempt's writes are already durable
        return ChannelResult(output, _rejected(ctx), replayed=True)


def state_before(store: StateStore, batch_id: int) -> StateStore:
    """A scratch in-memory copy of `store` as of its newest durable version before `batch_id`."""
    history = store.history
    earlier = [v for v in history.changelog_versions() + history.snapshot_versions() if v.batch < batch_id]
    scratch = MemoryStore(store.channel, BytesCodec(), history, store.key_hasher)
    # Without discard_later, restore only reads the history: the real store is untouched.
    scratch.restore(max(earlier) if earlier else INITIAL_VERSION)
    return scratch


def process(
    operator: KeyedOperator[Any], tx: Transaction, timers: TimerIndex, rows: pa.Table, ctx: Context
) -> pa.Table:
    """`update`, then due timers in rounds; the outputs in that order."""
    view: StateView[Any] = StateView(tx, operator.state_codec, timers, ctx.processing_ms, operator.ttl_ms)
    schema = operator.output_schema
    outputs = [require_schema(operator.update(rows, view, ctx), schema, "update")]
    for _ in range(MAX_TIMER_ROUNDS):
        due = timers.due(ctx.watermark_ms, ctx.processing_ms)
        if not due:
            return pa.concat_tables(outputs)
        view.consume(due)
        view.expire([d for d in due if d.domain == TTL_DOMAIN])
        user = [d for d in due if d.domain != TTL_DOMAIN]
        if user:
            outputs.append(require_schema(operator.on_timer(fired_table(user), view, ctx), schema, "on_timer"))
    raise RuntimeError(f"timers still due after {MAX_TIMER_ROUNDS} rounds: a callback re-registers a due timer")


def _rejected(ctx: Context) -> pa.Table:
    return pa.concat_tables(ctx.rejected, promote_options="default") if ctx.rejected else pa.table({})
