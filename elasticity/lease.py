"""One writer per elastic stage: a lease with a fencing token.

The stream's driver holds the lease for its lifetime, an offline migration for its duration.
Holding it is an exclusive `flock` on `<root>/lease.lock`, so the kernel releases it the moment
its holder dies (SIGKILL included): a dead holder's lease is taken over at once and safely,
a live one's never. Every acquisition raises the fencing token in `<root>/lease.json`; writers
check that the token is still theirs right before they commit (`Fence.check`), so a writer
that lost the lease (its lock released while it kept running) fails instead of writing.

A second writer gets `LeaseHeld`, naming the holder (host, pid, since).

Assumes a local POSIX filesystem for the root (where `flock` is reliable); a stage on another
filesystem is not leased (`acquire` returns None) and relies on a single deployment.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from elasticity.state import uris

log = logging.getLogger(__name__)

LOCK_FILE = "lease.lock"
LEASE_FILE = "lease.json"


@dataclass(frozen=True)
class Holder:
    """Who holds the lease, and its fencing token."""

    token: int
    host: str
    pid: int
    purpose: str
    since: float

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"pid {self.pid} on {self.host} ({self.purpose}) since {since}, lease token {self.token}"


class LeaseHeld(RuntimeError):
    """Another live process writes this stage."""


class FencedOut(RuntimeError):
    """This writer's lease was taken over: it must not commit."""


def read_holder(root: Path) -> Holder | None:
    """The last acquirer recorded in the lease file (None if none, or unreadable)."""
    try:
        return Holder(**json.loads((root / LEASE_FILE).read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None


@dataclass(frozen=True)
class Fence:
    """What a writer checks before it commits: the lease still carries its token."""

    root: str
    token: int

    def check(self) -> None:
        holder = read_holder(Path(self.root))
        if holder is None or holder.token != self.token:
            now = "nobody" if holder is None else holder.describe()
            raise FencedOut(f"lease token {self.token} of {self.root} is no longer current (held by {now})")


class Lease:
    """A held lease; `release()` (or the holder's death) frees it."""

    def __init__(self, root: Path, lock: IO[bytes], holder: Holder) -> None:
        self.root = root
        self._lock = lock
        self.holder = holder

    @property
    def fence(self) -> Fence:
        return Fence(str(self.root), self.holder.token)

    def release(self) -> None:
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()


def acquire(root: str, purpose: str, clock: float | None = None) -> Lease | None:
    """Take the stage's lease at `root` or raise `LeaseHeld` naming the live holder."""
    if not uris.is_local(root):
        log.warning("no lease for %s: flock needs a local folder, so one writer is the deployment's duty", root)
        return None
    folder = Path(uris.local_path(root))
    lock = _lock_or_refuse(folder)  # held open for the lease's lifetime
    previous = read_holder(folder)
    holder = Holder(
        token=(previous.token if previous is not None else 0) + 1,
        host=socket.gethostname(),
        pid=os.getpid(),
        purpose=purpose,
        since=time.time() if clock is None else clock,
    )
    _publish(folder / LEASE_FILE, json.dumps(asdict(holder)).encode())
    return Lease(folder, lock, holder)


def ensure_free(root: str) -> None:
    """Raise `LeaseHeld` naming the holder if a live process holds the stage's lease now.

    A quick refusal before costly start-up work (a Spark session takes seconds to minutes on a
    busy host); it takes nothing, so `acquire` afterwards still decides who writes."""
    if not uris.is_local(root):
        return
    lock = _lock_or_refuse(Path(uris.local_path(root)))
    fcntl.flock(lock, fcntl.LOCK_UN)
    lock.close()


def _lock_or_refuse(folder: Path) -> IO[bytes]:
    """The stage's lock file, exclusively locked; LeaseHeld naming the holder if it is taken."""
    folder.mkdir(parents=True, exist_ok=True)
    lock = open(folder / LOCK_FILE, "a+b")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        holder = read_holder(folder)
        who = holder.describe() if holder is not None else "another process (not yet recorded)"
        raise LeaseHeld(f"the stream state under {folder} is held by {who}; stop that process first") from None
    return lock


def _publish(path: Path, data: bytes) -> None:
    """Write-temp, fsync, rename, fsync the folder: the token must survive a crash of the host."""
    temp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    with open(temp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
