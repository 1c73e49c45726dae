"""Timers and TTL across rescales and replays: every registered event- or processing-time
timer fires exactly once, in the first batch whose watermark / processing time reaches it;
state not written for the TTL is never returned and is deleted; timers live in the reserved
namespace under their key's own hash, so migrations carry them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elasticity.hashing import hash_str
from elasticity.operators import (
    TIMER_PREFIX,
    Batch,
    Context,
    Count,
    Harness,
    KeyedAggregate,
    KeyedOperator,
    StateView,
    TimeDomain,
)
from elasticity.operators.timers import RESERVED_KEY_REASON
from elasticity.state import Int64Codec

from .drive import Step, drive, rescale_steps, scratch_dir, steps

KEYS = ["a", "b", "c", "d", "e", "f"]
FIRED = pa.schema(
    [
        pa.field("key", pa.string()),
        pa.field("domain", pa.string()),
        pa.field("time", pa.int64()),
        pa.field("batch", pa.int64()),
    ]
)


class TimerProbe(KeyedOperator[int]):
    """Registers the timer each row names; reports every firing with the batch it fired in."""

    state_codec = Int64Codec()
    output_schema = FIRED

    def update(self, rows: pa.Table, state: StateView[int], ctx: Context) -> pa.Table:
        for domain in TimeDomain:
            mine = rows.filter(pa.compute.equal(rows["domain"], domain.value))
            state.register_timers(
                mine["key"].to_pylist(), mine["key_hash"].to_pylist(), mine["time"].to_pylist(), domain
            )
        return self.empty_output()

    def on_timer(self, fired: pa.Table, state: StateView[int], ctx: Context) -> pa.Table:
        batch = pa.array(np.full(fired.num_rows, ctx.batch_id, dtype=np.int64))
        return pa.table([fired["key"], fired["domain"], fired["time"], batch], schema=FIRED)


def timer_plans() -> st.SearchStrategy[list[Step]]:
    rows = st.lists(
        st.tuples(st.sampled_from(KEYS), st.sampled_from(["event", "processing"]), st.integers(-5, 40)), max_size=10
    )
    batch = st.tuples(st.integers(0, 15), st.integers(0, 15), rows)
    return steps(batch, max_steps=12).map(_absolute_times)


def _absolute_times(plan: list[Step]) -> list[Step]:
    watermark = processing = 0
    out: list[Step] = []
    for step in plan:
        if step[0] not in ("batch", "partial"):
            out.append(step)
            continue
        dw, dp, rows = step[1]
        watermark, processing = watermark + dw, processing + dp
        now = {"event": watermark, "processing": processing}
        table = pa.table(
            {
                "key": pa.array([k for k, _, _ in rows], pa.string()),
                "domain": pa.array([d for _, d, _ in rows], pa.string()),
                "time": pa.array([now[d] + dt for _, d, dt in rows], pa.int64()),
            }
        )
        out.append((step[0], Batch(table, watermark_ms=watermark, processing_ms=processing), *step[2:]))
    return out


def expected_firings(batches: list[Batch]) -> list[tuple[str, str, int, int]]:
    """Oracle: pending timers as a set; after each batch's registrations, fire all that are due."""
    pending: set[tuple[str, str, int]] = set()
    fired = []
    for batch_id, batch in enumerate(batches):
        pending |= {(r["key"], r["domain"], r["time"]) for r in batch.rows.to_pylist()}
        now = {"event": batch.watermark_ms, "processing": batch.processing_ms}
        due = {t for t in pending if t[2] <= now[t[1]]}
        fired += [(*t, batch_id) for t in due]
        pending -= due
    return sorted(fired)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=timer_plans())
def test_every_timer_fires_exactly_once_across_rescales_and_replays(plan: list[Step]) -> None:
    with scratch_dir() as root:
        harness = Harness(TimerProbe(), root, channels=2)
        results = drive(harness, plan)
        fired = sorted(
            (r["key"], r["domain"], r["time"], r["batch"]) for res in results.values() for r in res.output.to_pylist()
        )
        assert fired == expected_firings(harness.batches)
        harness.close()


TTL = 50


def ttl_plans() -> st.SearchStrategy[list[Step]]:
    keys = st.lists(st.sampled_from(KEYS), max_size=8)
    raw = st.lists(
        st.one_of(
            st.tuples(st.just("batch"), st.tuples(st.integers(0, 40), keys)),
            st.tuples(st.just("replay")),
            rescale_steps(),
        ),
        min_size=1,
        max_size=12,
    )

    def absolute(plan: list[Step]) -> list[Step]:
        processing, out = 0, []
        for step in plan:
            if step[0] == "batch":
                processing += step[1][0]
                rows = pa.table({"key": pa.array(step[1][1], pa.string()), "value": [1.0] * len(step[1][1])})
                out.append(("batch", Batch(rows, processing_ms=processing)))
            else:
                out.append(step)
        return out

    return raw.map(absolute)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=ttl_plans())
def test_ttl_state_is_never_returned_once_expired_and_is_deleted(plan: list[Step]) -> None:
    with scratch_dir() as root:
        harness = Harness(KeyedAggregate(Count(), ttl_ms=TTL), root, channels=2)
        results = drive(harness, plan)
        state: dict[str, tuple[int, int]] = {}  # key -> (count, processing time of its last write)
        for batch_id, batch in enumerate(harness.batches):
            now = batch.processing_ms
            keys = batch.rows["key"].to_pylist()
            expected = {}
            for key in dict.fromkeys(keys):
                count, written = state.get(key, (0, now))
                count = count if written + TTL > now else 0
                state[key] = (count + keys.count(key), now)
                expected[key] = state[key][0]
            got = {r["key"]: r["value"] for r in results[batch_id].output.to_pylist()}
            assert got == expected
        last = harness.batches[-1].processing_ms if harness.batches else 0
        harness.run(
            Batch(pa.table({"key": pa.array([], pa.string()), "value": pa.array([], pa.float64())}), 0, last + TTL)
        )
        assert harness.entries().num_rows == 0  # every value and its cleanup timer deleted
        harness.close()


def test_timers_live_under_their_keys_hash_and_move_with_a_split() -> None:
    with scratch_dir() as root:
        harness = Harness(TimerProbe(), root, channels=1)
        keys = [f"k{i}" for i in range(40)]
        rows = pa.table({"key": keys, "domain": ["event"] * 40, "time": pa.array([100] * 40, pa.int64())})
        harness.run(Batch(rows, watermark_ms=0))
        harness.rescale("split", 0)
        entries = harness.entries().to_pylist()
        assert sorted(e["key"] for e in entries) == sorted(TIMER_PREFIX + k for k in keys)
        assert all(e["hash"] == hash_str(e["key"][len(TIMER_PREFIX) :]) for e in entries)
        assert {harness.layout.owner(hash_str(k)) for k in keys} == {0, 1}  # both channels hold timers
        fired = harness.run(Batch(rows.slice(0, 0), watermark_ms=100)).output
        assert sorted(fired["key"].to_pylist()) == sorted(keys)
        harness.close()


def test_reserved_keys_are_rejected_by_an_operator_with_timers_and_plain_keys_without() -> None:
    """A key in the timers' namespace would alias a key's timers: an operator with timers rejects
    its rows (kept with the reason; the batch goes on); one without timers just counts it."""
    rows = pa.table({"key": [TIMER_PREFIX + "x", "y", TIMER_PREFIX + "x"], "value": [1.0, 2.0, 3.0]})
    with scratch_dir() as root:
        harness = Harness(KeyedAggregate(Count(), ttl_ms=TTL), root)
        result = harness.run(Batch(rows))
        assert result.output.to_pylist() == [{"key": "y", "value": 1}]
        assert result.rejected.column("reason").to_pylist() == [RESERVED_KEY_REASON] * 2
        harness.close()
    with scratch_dir() as root:
        harness = Harness(KeyedAggregate(Count()), root)
        counted = {r["key"]: r["value"] for r in harness.run(Batch(rows)).output.to_pylist()}
        assert counted == {TIMER_PREFIX + "x": 2, "y": 1}
        harness.close()
