"""What every lease records and raises, wherever the stage lives: the holder and its token, and
the two refusals (another live writer; a deposed one)."""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

LEASE_FILE = "lease.json"


@dataclass(frozen=True)
class Holder:
    """Who holds the lease, and its fencing token."""

    token: int
    host: str
    pid: int
    purpose: str
    since: float

    @classmethod
    def next_after(cls, previous: Holder | None, purpose: str, clock: float | None = None) -> Holder:
        """This process as the holder after `previous`, one token higher (a deposed writer's
        token then never matches again)."""
        return cls(
            token=(previous.token if previous is not None else 0) + 1,
            host=socket.gethostname(),
            pid=os.getpid(),
            purpose=purpose,
            since=time.time() if clock is None else clock,
        )

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"pid {self.pid} on {self.host} ({self.purpose}) since {since}, lease token {self.token}"


class LeaseHeld(RuntimeError):
    """Another live process writes this stage."""


class FencedOut(RuntimeError):
    """This writer's lease was taken over: it must not commit."""


def refusal(where: str, holder: Holder | None, detail: str = "") -> LeaseHeld:
    """The one wording of a refusal: whose the stage is and what to do."""
    who = holder.describe() if holder is not None else "another process (not yet recorded)"
    return LeaseHeld(f"the stream state under {where} is held by {who}{detail}; stop that process first")


def read_local_holder(folder: Path) -> Holder | None:
    """The last acquirer recorded in a local stage folder's lease file (None if none, or unreadable)."""
    try:
        return Holder(**json.loads((folder / LEASE_FILE).read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None
