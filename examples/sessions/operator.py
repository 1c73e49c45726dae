"""`Sessionize`: the keyed stateful operator of the clickstream sessionization example job.

Input rows: `user_id` (the key), `page`, `event_time` (epoch ms). A user's session is a run of
their clicks where each click comes at most `gap_ms` after the previous one (in event time);
a click more than `gap_ms` after the session's last click starts a new session. Each closed
session is emitted once as (user_id, landing_page, session_start_ms, session_end_ms, clicks):
the landing page is the page of the session's first click, the end is its last click's time.

**Lateness.** A row whose `event_time` is below the batch's watermark is late: it is reported
through `ctx.reject(rows, "late event: ...")` and never counted. Rows missing the user, page
or event time are rejected as malformed.

**Closing.** A session with last click `last` can only be extended by a click at or before
`last + gap_ms`; once the watermark passes that time (reaches `last + gap_ms + 1`) no on-time
click can, so an event-time timer at `last + gap_ms + 1` emits it. (A timer at `last + gap_ms`
would close a session that a click at exactly `last + gap_ms`, on time in a later batch with
the same watermark, still extends: the output would depend on how clicks were batched.)
A session is *not* emitted when a later click splits it off: an on-time click arriving out of
order could still land in the gap. So a user may have several open sessions; a click bridging
two of them merges them. Every extension or merge moves the sessions' timers (the old one
deleted, the new one registered). Because on-time clicks are never below the watermark, an
emitted session can never change again: the output is exactly the sessions of all on-time
clicks, however they were batched or routed (`examples.sessions.oracle` computes it directly).

**Ties.** Clicks at the same event time are ordered by page (then arrival position), so the
landing page of a session starting with simultaneous clicks is the smallest such page.

State per user (`ArrowStructCodec`, schema version 1): the list of the user's open sessions.
`update` and `on_timer` are deterministic in (rows, state, ctx): the runner recomputes a
replayed batch's outputs from the state before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from elasticity.operators import Context, KeyedOperator, StateView, TimeDomain, group_rows
from elasticity.state.codecs import ArrowStructCodec

USER = "user_id"
PAGE = "page"
EVENT_TIME = "event_time"
_POSITION = "__arrival_position"
"""A scratch column: the last sort key, so equal (event_time, page) rows keep arrival order."""

SESSION_TYPE = pa.struct(
    [
        pa.field("start_ms", pa.int64(), nullable=False),
        pa.field("last_ms", pa.int64(), nullable=False),
        pa.field("landing_page", pa.string(), nullable=False),
        pa.field("clicks", pa.int64(), nullable=False),
    ]
)
STATE_SCHEMA_V1 = pa.schema(
    [pa.field("sessions", pa.list_(pa.field("item", SESSION_TYPE, nullable=False)), nullable=False)]
)
"""One user's state: their open sessions, by start. A later schema version is added to the
codec's versions (`ArrowStructCodec({1: STATE_SCHEMA_V1, 2: ...})`), never replacing v1, so
state stored by a running job stays readable."""

OUTPUT_SCHEMA = pa.schema(
    [
        pa.field(USER, pa.string()),
        pa.field("landing_page", pa.string()),
        pa.field("session_start_ms", pa.int64()),
        pa.field("session_end_ms", pa.int64()),
        pa.field("clicks", pa.int64()),
    ]
)

State = dict[str, Any]


@dataclass(frozen=True, order=True)
class OpenSession:
    """A session not yet emitted. Field order is the sort order: by start, then landing page,
    so when sessions merge the earliest first click (ties: smallest page) stays the landing page."""

    start_ms: int
    landing_page: str
    last_ms: int
    clicks: int


def runs(times: np.ndarray, pages: Sequence[str], gap_ms: int) -> list[OpenSession]:
    """The sessions of one user's clicks alone, `times` sorted (and `pages` in the same order)."""
    if len(times) == 0:
        return []
    # A new session starts wherever the time since the previous click exceeds the gap.
    firsts = np.concatenate(([0], np.flatnonzero(np.diff(times) > gap_ms) + 1))
    ends = np.concatenate((firsts[1:], [len(times)]))
    return [
        OpenSession(int(times[a]), pages[a], int(times[b - 1]), int(b - a))
        for a, b in zip(firsts.tolist(), ends.tolist())
    ]


def merge_sessions(sessions: list[OpenSession], gap_ms: int) -> list[OpenSession]:
    """Sessions that are within `gap_ms` of each other merged, by start. Each input is a gap-connected
    run of clicks, so merging them gives the sessions of all their clicks together."""
    merged: list[OpenSession] = []
    for session in sorted(sessions):
        if merged and session.start_ms - merged[-1].last_ms <= gap_ms:
            current = merged[-1]
            merged[-1] = OpenSession(
                current.start_ms,
                current.landing_page,
                max(current.last_ms, session.last_ms),
                current.clicks + session.clicks,
            )
        else:
            merged.append(session)
    return merged


class Sessionize(KeyedOperator[State]):
    """Per user: clickstream sessions split by `gap_ms` of inactivity, each emitted once when the
    watermark passes its last click + `gap_ms`. See the module docstring for the exact rules."""

    key_column = USER
    state_codec = ArrowStructCodec({1: STATE_SCHEMA_V1})
    output_schema = OUTPUT_SCHEMA

    def __init__(self, gap_ms: int = 30_000) -> None:
        if gap_ms < 0:
            raise ValueError(f"gap_ms must be >= 0, not {gap_ms}")
        self.gap_ms = int(gap_ms)

    def close_at(self, session: OpenSession) -> int:
        """The watermark at which no on-time click can extend the session any more: its timer."""
        return session.last_ms + self.gap_ms + 1

    # ---- rows -------------------------------------------------------------------------------
    def update(self, rows: pa.Table, state: StateView[State], ctx: Context) -> pa.Table:
        rows = self._accepted(rows, ctx)
        if rows.num_rows == 0:
            return self.empty_output()
        # One sort for the whole channel; group_rows keeps each user's rows in this order.
        rows = rows.append_column(_POSITION, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
        order = pc.sort_indices(
            rows, sort_keys=[(EVENT_TIME, "ascending"), (PAGE, "ascending"), (_POSITION, "ascending")]
        )
        rows = rows.take(order)
        groups = group_rows(rows, self.key_column)
        times = rows[EVENT_TIME].to_numpy()
        pages = rows[PAGE].to_pylist()

        new_states: list[State] = []
        stale: tuple[list[str], list[int], list[int]] = ([], [], [])
        fresh: tuple[list[str], list[int], list[int]] = ([], [], [])
        for key, key_hash, idx, stored in zip(
            groups.keys, groups.hashes, groups.rows, state.get_many(groups.keys, groups.hashes)
        ):
            before = load(stored)
            after = merge_sessions([*before, *runs(times[idx], [pages[i] for i in idx], self.gap_ms)], self.gap_ms)
            # One timer per open session: sessions extended or merged away give theirs up.
            old_times = {self.close_at(s) for s in before}
            new_times = {self.close_at(s) for s in after}
            for times_of, target in ((old_times - new_times, stale), (new_times - old_times, fresh)):
                for t in sorted(times_of):
                    target[0].append(key)
                    target[1].append(key_hash)
                    target[2].append(t)
            new_states.append(dump(after))
        state.put_many(groups.keys, groups.hashes, new_states)
        state.delete_timers(*stale, TimeDomain.EVENT)
        state.register_timers(*fresh, TimeDomain.EVENT)
        return self.empty_output()

    def _accepted(self, rows: pa.Table, ctx: Context) -> pa.Table:
        """The rows to count; malformed and late ones are reported through `ctx.reject`."""
        if rows.num_rows == 0:
            return rows
        malformed = pc.or_(pc.or_(pc.is_null(rows[USER]), pc.is_null(rows[PAGE])), pc.is_null(rows[EVENT_TIME]))
        ctx.reject(rows.filter(malformed), "malformed event: user_id, page or event_time is null")
        rows = rows.filter(pc.invert(malformed))
        late = pc.less(rows[EVENT_TIME], pa.scalar(ctx.watermark_ms, pa.int64()))
        ctx.reject(rows.filter(late), f"late event: event_time below the watermark {ctx.watermark_ms}")
        return rows.filter(pc.invert(late))

    # ---- timers -----------------------------------------------------------------------------
    def on_timer(self, fired: pa.Table, state: StateView[State], ctx: Context) -> pa.Table:
        groups = group_rows(fired, "key")
        emitted: list[tuple[str, OpenSession]] = []
        kept: tuple[list[str], list[int], list[State]] = ([], [], [])
        gone: tuple[list[str], list[int]] = ([], [])
        for key, key_hash, stored in zip(groups.keys, groups.hashes, state.get_many(groups.keys, groups.hashes)):
            open_ = load(stored)
            # Close by the watermark, not by the fired time: a firing with nothing due is stale.
            closed = [s for s in open_ if self.close_at(s) <= ctx.watermark_ms]
            if not closed:
                continue
            emitted += [(key, s) for s in closed]
            still_open = [s for s in open_ if self.close_at(s) > ctx.watermark_ms]
            if still_open:
                kept[0].append(key)
                kept[1].append(key_hash)
                kept[2].append(dump(still_open))
            else:
                gone[0].append(key)
                gone[1].append(key_hash)
        state.put_many(*kept)
        state.delete_many(*gone)
        return pa.table(
            {
                USER: pa.array([k for k, _ in emitted], pa.string()),
                "landing_page": pa.array([s.landing_page for _, s in emitted], pa.string()),
                "session_start_ms": pa.array([s.start_ms for _, s in emitted], pa.int64()),
                "session_end_ms": pa.array([s.last_ms for _, s in emitted], pa.int64()),
                "clicks": pa.array([s.clicks for _, s in emitted], pa.int64()),
            },
            schema=self.output_schema,
        )


def load(stored: State | None) -> list[OpenSession]:
    """A user's open sessions from their stored state (none if absent)."""
    return [] if stored is None else [OpenSession(**s) for s in stored["sessions"]]


def dump(sessions: list[OpenSession]) -> State:
    return {"sessions": [asdict(s) for s in sessions]}
