"""Single-process reference of the sessionization example: what `Sessionize` must emit, computed
directly from the batches (no state, no timers, no channels), plus the per-landing-page summary
the example job reports. The operator's tests compare against it.

The same rules as the operator (see `examples.sessions.operator`): a click whose event time is
below its batch's watermark is late and left out; the on-time clicks of each user, ordered by
(event time, page), are split wherever the time since the previous click exceeds `gap_ms`; a
session is closed once the watermark passes its last click + `gap_ms`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Event = tuple[str, str, int]
"""(user_id, page, event_time ms)."""

Batch = tuple[int, Sequence[Event]]
"""(the batch's watermark ms, its events in arrival order)."""

ClosedSession = tuple[str, str, int, int, int]
"""(user_id, landing_page, session_start_ms, session_end_ms, clicks): one output row."""


def late_events(batches: Iterable[Batch]) -> list[Event]:
    """Every event below its batch's watermark, sorted."""
    return sorted(e for watermark, events in batches for e in events if e[2] < watermark)


def sessions_oracle(batches: Iterable[Batch], gap_ms: int, final_watermark_ms: int) -> list[ClosedSession]:
    """The sessions closed once the watermark has reached `final_watermark_ms`, sorted."""
    batches = list(batches)
    # Watermarks never go back: the last one reached is the highest.
    watermark = max([final_watermark_ms, *(w for w, _ in batches)])
    by_user: dict[str, list[tuple[int, str]]] = {}
    for batch_watermark, events in batches:
        for user, page, time in events:
            if time >= batch_watermark:
                by_user.setdefault(user, []).append((time, page))
    closed = []
    for user, clicks in by_user.items():
        clicks.sort()
        start, landing, last, count = clicks[0][0], clicks[0][1], clicks[0][0], 0
        for time, page in clicks:
            if time - last > gap_ms:
                closed.append((user, landing, start, last, count))
                start, landing, count = time, page, 0
            last, count = time, count + 1
        closed.append((user, landing, start, last, count))
    return sorted(s for s in closed if s[3] + gap_ms < watermark)


def page_summary(sessions: Iterable[ClosedSession]) -> dict[str, tuple[int, float]]:
    """landing page -> (number of sessions, mean session duration ms), duration = end - start."""
    durations: dict[str, list[int]] = {}
    for _, landing, start, end, _ in sessions:
        durations.setdefault(landing, []).append(end - start)
    return {page: (len(d), sum(d) / len(d)) for page, d in sorted(durations.items())}
