"""A stage's lease on a local folder: an exclusive `flock` held for the holder's lifetime.

Holding it is an exclusive `flock` on `<root>/lease.lock`, so the kernel releases it the moment
its holder dies (SIGKILL included): a dead holder's lease is taken over at once and safely, a live
one's never. Every acquisition raises the fencing token in `<root>/lease.json`.

Assumes a local POSIX filesystem (where `flock` is reliable); a root on an object store is leased
by `elasticity.lease.store`.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import IO

from elasticity.lease.fence import Lease
from elasticity.lease.holder import LEASE_FILE, Holder, read_local_holder, refusal

LOCK_FILE = "lease.lock"


class LocalLease(Lease):
    """A lease held by an open, locked file; closing it (or dying) frees it."""

    def __init__(self, folder: Path, lock: IO[bytes], holder: Holder) -> None:
        super().__init__(str(folder), holder)
        self._lock = lock

    def release(self) -> None:
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()


def acquire_local(folder: Path, purpose: str, clock: float | None = None) -> LocalLease:
    """Take the lease of the stage in `folder` or raise `LeaseHeld` naming the live holder."""
    lock = _lock_or_refuse(folder)  # held open for the lease's lifetime
    holder = Holder.next_after(read_local_holder(folder), purpose, clock)
    _publish(folder / LEASE_FILE, json.dumps(asdict(holder)).encode())
    return LocalLease(folder, lock, holder)


def ensure_free_local(folder: Path) -> None:
    """Raise `LeaseHeld` naming the holder if a live process holds the folder's lease now."""
    lock = _lock_or_refuse(folder)
    fcntl.flock(lock, fcntl.LOCK_UN)
    lock.close()


def lock_is_held(folder: Path) -> bool | None:
    """Whether a process holds the folder's lease lock now, read from Linux's `/proc/locks`
    without taking it (taking it, even for a moment, could refuse a driver starting meanwhile);
    None where the kernel does not say."""
    try:
        stat = (folder / LOCK_FILE).stat()
    except FileNotFoundError:
        return False
    # A lock's line: `1: FLOCK  ADVISORY  WRITE <pid> <major hex>:<minor hex>:<inode> 0 EOF`.
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    return any(line.split()[1:2] == ["FLOCK"] and device in line.split() for line in table.splitlines())


def _lock_or_refuse(folder: Path) -> IO[bytes]:
    """The stage's lock file, exclusively locked; LeaseHeld naming the holder if it is taken."""
    folder.mkdir(parents=True, exist_ok=True)
    lock = open(folder / LOCK_FILE, "a+b")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise refusal(str(folder), read_local_holder(folder)) from None
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
