"""One writer per elastic stage: a lease with a fencing token, wherever the stage's folder is.

The stream's driver holds the lease for its lifetime, an offline migration for its duration. On a
local folder it is a `flock` the kernel frees when its holder dies (`local`); on an object store,
a lease object taken with a conditional put and renewed until released or expired (`store`).
Every acquisition raises the fencing token; writers check that the token is still theirs right
before they commit (`Fence.check`), so a writer that lost the lease fails instead of writing.

A second writer gets `LeaseHeld`, naming the holder (host, pid, since).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from elasticity.lease.fence import Fence, Lease, read_holder
from elasticity.lease.holder import LEASE_FILE, FencedOut, Holder, LeaseHeld, read_local_holder
from elasticity.lease.local import acquire_local, ensure_free_local, lock_is_held
from elasticity.lease.record import process_exists, read_store_record
from elasticity.lease.store import DEFAULT_TTL_S, acquire_on_store, ensure_free_on_store
from elasticity.state import uris

__all__ = [
    "DEFAULT_TTL_S",
    "LEASE_FILE",
    "Fence",
    "FencedOut",
    "Holder",
    "Lease",
    "LeaseHeld",
    "acquire",
    "ensure_free",
    "live_holder",
    "read_holder",
]


def acquire(root: str, purpose: str, ttl_s: float = DEFAULT_TTL_S) -> Lease:
    """Take the stage's lease at `root` or raise `LeaseHeld` naming the live holder. `ttl_s`: on
    an object store, how long the lease outlives a holder that stopped renewing it."""
    if uris.is_local(root):
        return acquire_local(Path(uris.local_path(root)), purpose)
    return acquire_on_store(root, purpose, ttl_s)


def ensure_free(root: str) -> None:
    """Raise `LeaseHeld` naming the holder if a live process holds the stage's lease now.

    A quick refusal before costly start-up work (a Spark session takes seconds to minutes on a
    busy host); it takes nothing, so `acquire` afterwards still decides who writes."""
    if uris.is_local(root):
        ensure_free_local(Path(uris.local_path(root)))
    else:
        ensure_free_on_store(root)


def live_holder(root: str) -> Holder | None:
    """Who writes the stage now, read without taking its lease (for display; `acquire` decides):
    on a local folder the recorded holder while the lock is held (or, where the kernel does not
    list its locks, while the holder's process exists), on an object store the holder of a live
    lease."""
    here = socket.gethostname()
    if uris.is_local(root):
        folder = Path(uris.local_path(root))
        holder = read_local_holder(folder)
        held = lock_is_held(folder)
        if held is None:
            held = holder is not None and (holder.host != here or process_exists(holder.pid))
        return holder if held else None
    record = read_store_record(root)
    return record.holder if record is not None and record.live(time.time(), here) else None
