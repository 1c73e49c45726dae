"""Pacing: send what the rate profile asks for, slice by slice, against an injected clock and sink.

Every `slice_s` the producer computes how many records the profile has asked for since the
start (the integral of the rate), and sends the difference in one batch. A producer that falls
behind catches up at most `max_backlog_s` worth of records; older debt is dropped and reported,
so a slow producer shows up as achieved < target instead of as a burst after the peak.

The clock, sleep and sink are parameters, so the logic is tested with a fake clock and no Kafka.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from pipelines.load.profiles import RateProfile
from pipelines.load.records import Batch, RecordSource

PROGRESS_EVERY_S = 0.25
MAX_BURST_RECORDS = 2000  # most records per send call, so a producer that is behind checks the clock


class RecordSink(Protocol):
    """Where batches go: a Kafka producer, or a list in tests."""

    def send(self, batch: Batch) -> None: ...

    def flush(self) -> None: ...


@dataclass(frozen=True)
class PacingClock:
    """Monotonic time for pacing, wall-clock milliseconds for event times, and sleep."""

    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Progress:
    """Where one producer stands: seconds since its start and records handed to the sink."""

    elapsed_s: float
    sent: int


@dataclass
class PacingResult:
    """What one producer did: records sent and dropped, per wall-clock second."""

    sent: int = 0
    dropped: int = 0
    target: int = 0  # records the profile asked for up to where the run ended
    elapsed_s: float = 0.0  # start to end of the final flush
    stopped_early: bool = False
    per_second_sent: list[int] = field(default_factory=list)


def _backlog_cap(profile: RateProfile, t: float, window_s: float) -> float:
    """Records the profile asked for in the last `window_s` seconds: the most we may still owe."""
    return float(profile.records_due(t) - profile.records_due(max(0.0, t - window_s)))


def _next_slice_boundary(now: float, slice_s: float) -> float:
    return (math.floor(now / slice_s + 1e-9) + 1) * slice_s


def run_paced(
    profile: RateProfile,
    source: RecordSource,
    sink: RecordSink,
    *,
    slice_s: float = 0.05,
    max_backlog_s: float = 1.0,
    clock: PacingClock | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_progress: Callable[[Progress], None] | None = None,
) -> PacingResult:
    """Send the profile's records over its duration, paced in slices; flush at the end or on stop."""
    clock = clock or PacingClock()
    seconds = max(1, math.ceil(profile.duration_s - 1e-9))
    per_second = np.zeros(seconds, dtype=np.int64)
    result = PacingResult()
    start = clock.monotonic()
    last_progress = -math.inf
    while True:
        now = clock.monotonic() - start
        t = min(now, profile.duration_s)
        due = math.floor(float(profile.records_due(t)) + 1e-9)
        owed = due - result.dropped - result.sent
        cap = math.ceil(_backlog_cap(profile, t, max_backlog_s + slice_s))
        if owed > cap:  # too far behind: give up the oldest debt rather than burst later
            result.dropped += owed - cap
            owed = cap
        # At most two slices' worth per send, so a producer that is behind still looks at the clock
        # often: its per-second series stays honest and old debt is dropped as time passes.
        burst = min(MAX_BURST_RECORDS, max(1, math.ceil(_backlog_cap(profile, t, 2 * slice_s))))
        if now >= profile.duration_s and owed > burst:  # the run ends on time: drop what it cannot send
            result.dropped += owed - burst
            owed = burst
        if owed > 0:
            batch = source.take(min(owed, burst), clock.wall_ms())
            sink.send(batch)
            result.sent += len(batch)
            per_second[min(int(t), seconds - 1)] += len(batch)
        result.target = due
        behind = owed > burst
        if on_progress is not None and now - last_progress >= PROGRESS_EVERY_S:
            on_progress(Progress(elapsed_s=t, sent=result.sent))
            last_progress = now
        if (now >= profile.duration_s and not behind) or source.exhausted:
            break
        if should_stop():
            result.stopped_early = True
            break
        if not behind:
            clock.sleep(max(0.0, start + _next_slice_boundary(now, slice_s) - clock.monotonic()))
    sink.flush()
    result.elapsed_s = clock.monotonic() - start
    result.per_second_sent = per_second[: min(seconds, int(t) + 1)].tolist()
    if on_progress is not None:
        on_progress(Progress(elapsed_s=t, sent=result.sent))
    return result


def run_unpaced(
    source: RecordSource,
    sink: RecordSink,
    *,
    chunk: int = 5000,
    clock: PacingClock | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_progress: Callable[[Progress], None] | None = None,
) -> PacingResult:
    """Send every record of a bounded source as fast as the sink takes them (pre-loading)."""
    clock = clock or PacingClock()
    result = PacingResult()
    per_second: list[int] = []
    start = clock.monotonic()
    last_progress = -math.inf
    while not source.exhausted:
        if should_stop():
            result.stopped_early = True
            break
        batch = source.take(chunk, clock.wall_ms())
        sink.send(batch)
        now = clock.monotonic() - start
        second = int(now)
        per_second.extend([0] * (second + 1 - len(per_second)))
        per_second[second] += len(batch)
        result.sent += len(batch)
        if on_progress is not None and now - last_progress >= PROGRESS_EVERY_S:
            on_progress(Progress(elapsed_s=now, sent=result.sent))
            last_progress = now
    sink.flush()
    result.elapsed_s = clock.monotonic() - start
    result.target = result.sent
    result.per_second_sent = per_second
    if on_progress is not None:
        on_progress(Progress(elapsed_s=result.elapsed_s, sent=result.sent))
    return result
