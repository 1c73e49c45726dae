"""Polling for a condition in tests of the real stack, with a message naming what never came."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(what: str, condition: Callable[[], T], timeout_s: float, poll_s: float = 1.0) -> T:
    """`condition()`'s first truthy value, or AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(poll_s)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
