"""Event-time windows over a built-in aggregate: tumbling, sliding and session, with a watermark.

A row whose event time is below the batch's watermark is *late*: reported through
`ctx.reject(rows, "late")`, never counted. That one rule is sound for every window kind: a
window [start, end) is emitted when the watermark reaches `end`, and an on-time row (time >=
watermark) can only fall in windows ending after it, so no emitted window ever changes. Each
open window has an event-time timer at its end; when it fires the window is emitted once as
(key, window_start, window_end, value) and dropped from the key's state.

State per key is one JSON value: a list of [start, end, accumulator as JSON]. Session windows
are [first event, last event + gap) and merge when a row falls within `gap` of two of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from elasticity.operators.aggregates import Aggregate
from elasticity.operators.api import Context, KeyedOperator, TimeDomain
from elasticity.operators.groups import group_rows
from elasticity.operators.view import StateView
from elasticity.state.codecs import JsonCodec

Window = tuple[int, int]
OpenWindows = dict[Window, Any]
"""(start, end) -> accumulator, for one key."""


def window_schema(result_type: pa.DataType, key_column: str = "key") -> pa.Schema:
    return pa.schema(
        [
            pa.field(key_column, pa.string()),
            pa.field("window_start", pa.int64()),
            pa.field("window_end", pa.int64()),
            pa.field("value", result_type),
        ]
    )


class Windowing(ABC):
    """Where rows of one key go, given the key's open windows."""

    @abstractmethod
    def place(self, agg: Aggregate[Any], open_: OpenWindows, times: np.ndarray, values: pa.Array) -> OpenWindows:
        """Fold rows (event times, values) into the open windows; returns the new open windows."""


@dataclass(frozen=True)
class Tumbling(Windowing):
    """Fixed, non-overlapping windows of `size_ms`, aligned to the epoch."""

    size_ms: int

    def place(self, agg: Aggregate[Any], open_: OpenWindows, times: np.ndarray, values: pa.Array) -> OpenWindows:
        starts = ((times // self.size_ms) * self.size_ms).tolist()  # Python ints: the state is JSON
        return _fold_fixed(agg, open_, [[(s, s + self.size_ms)] for s in starts], values)


@dataclass(frozen=True)
class Sliding(Windowing):
    """Windows of `size_ms` starting every `slide_ms`; a row is in every window covering it."""

    size_ms: int
    slide_ms: int

    def place(self, agg: Aggregate[Any], open_: OpenWindows, times: np.ndarray, values: pa.Array) -> OpenWindows:
        per_row = []
        for t in times.tolist():
            last = (t // self.slide_ms) * self.slide_ms
            starts = range(last, t - self.size_ms, -self.slide_ms)
            per_row.append([(s, s + self.size_ms) for s in starts])
        return _fold_fixed(agg, open_, per_row, values)


def _fold_fixed(agg: Aggregate[Any], open_: OpenWindows, per_row: list[list[Window]], values: pa.Array) -> OpenWindows:
    """Each window gets its rows' values in one `add`, rows in arrival order."""
    rows_of: dict[Window, list[int]] = {}
    for i, windows in enumerate(per_row):
        for window in windows:
            rows_of.setdefault(window, []).append(i)
    out = dict(open_)
    for window, rows in rows_of.items():
        out[window] = agg.add(out.get(window, agg.zero()), values.take(pa.array(rows)))
    return out


@dataclass(frozen=True)
class Session(Windowing):
    """Per-key sessions closed by `gap_ms` of inactivity: [first event, last event + gap)."""

    gap_ms: int

    def place(self, agg: Aggregate[Any], open_: OpenWindows, times: np.ndarray, values: pa.Array) -> OpenWindows:
        out = dict(open_)
        for i in np.argsort(times, kind="stable").tolist():
            t = int(times[i])
            start, end = t, t + self.gap_ms
            acc = agg.add(agg.zero(), values.take(pa.array([i])))
            for s, e in [w for w in out if w[0] < end and w[1] > start]:
                acc = agg.merge(out.pop((s, e)), acc)
                start, end = min(start, s), max(end, e)
            out[(start, end)] = acc
        return out


class WindowedAggregate(KeyedOperator[list[list[Any]]]):
    """An aggregate per key and event-time window, emitted once when the watermark passes the window."""

    state_codec: JsonCodec[list[list[Any]]] = JsonCodec()

    def __init__(
        self,
        aggregate: Aggregate[Any],
        windowing: Windowing,
        time_column: str = "ts",
        value_column: str = "value",
        key_column: str = "key",
    ) -> None:
        self.aggregate = aggregate
        self.windowing = windowing
        self.time_column = time_column
        self.value_column = value_column
        self.key_column = key_column
        self.output_schema = window_schema(aggregate.result_type, key_column)

    def update(self, rows: pa.Table, state: StateView[list[list[Any]]], ctx: Context) -> pa.Table:
        late = pc.less(rows[self.time_column], pa.scalar(ctx.watermark_ms, pa.int64()))
        ctx.reject(rows.filter(late), "late")
        rows = rows.filter(pc.invert(late))
        groups = group_rows(rows, self.key_column)
        times = rows[self.time_column].to_numpy()
        values = rows[self.value_column].combine_chunks()
        stored = state.get_many(groups.keys, groups.hashes)
        new_states = []
        for key, key_hash, idx, raw in zip(groups.keys, groups.hashes, groups.rows, stored):
            before = self._load(raw)
            after = self.windowing.place(self.aggregate, before, times[idx], values.take(pa.array(idx)))
            self._retime(state, key, key_hash, set(before) - set(after), set(after) - set(before))
            new_states.append(self._dump(after))
        state.put_many(groups.keys, groups.hashes, new_states)
        return self.empty_output()

    def on_timer(self, fired: pa.Table, state: StateView[list[list[Any]]], ctx: Context) -> pa.Table:
        groups = group_rows(fired, self.key_column)
        out: list[tuple[str, int, int, Any]] = []
        for key, key_hash, raw in zip(groups.keys, groups.hashes, state.get_many(groups.keys, groups.hashes)):
            open_ = self._load(raw)
            closed = sorted(w for w in open_ if w[1] <= ctx.watermark_ms)
            out += [(key, s, e, self.aggregate.result(open_.pop((s, e)))) for s, e in closed]
            if open_:
                state.put(key, key_hash, self._dump(open_))
            else:
                state.delete(key, key_hash)
        return pa.table(
            [pa.array([o[i] for o in out], t) for i, t in enumerate(self.output_schema.types)],
            schema=self.output_schema,
        )

    @staticmethod
    def _retime(state: StateView[Any], key: str, key_hash: int, gone: set[Window], new: set[Window]) -> None:
        """One timer per open window end; a session absorbed by a longer one gives up its timer."""
        gone_ends = {e for _, e in gone} - {e for _, e in new}
        new_ends = {e for _, e in new}
        state.delete_timers([key] * len(gone_ends), [key_hash] * len(gone_ends), sorted(gone_ends), TimeDomain.EVENT)
        state.register_timers([key] * len(new_ends), [key_hash] * len(new_ends), sorted(new_ends), TimeDomain.EVENT)

    def _load(self, raw: list[list[Any]] | None) -> OpenWindows:
        return {(int(s), int(e)): self.aggregate.from_json(a) for s, e, a in raw or []}

    def _dump(self, open_: OpenWindows) -> list[list[Any]]:
        return [[s, e, self.aggregate.to_json(a)] for (s, e), a in sorted(open_.items())]
