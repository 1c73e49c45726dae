"""The injected clock: the loop and the controller never read the wall clock themselves.

`SystemClock` is the real one (monotonic seconds); `ManualClock` is the fake that tests and the
simulation advance explicitly, so cooldowns and windows are deterministic.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic time line."""
        ...


class SystemClock:
    """Monotonic wall time (never goes back when NTP adjusts the system clock)."""

    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = float(start_s)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._now += seconds
        return self._now

    def set(self, time_s: float) -> None:
        if time_s < self._now:
            raise ValueError("a clock does not go back")
        self._now = float(time_s)
