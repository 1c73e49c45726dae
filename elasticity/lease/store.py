"""A stage's lease on an object store: a lease object taken with a conditional put and kept alive
by renewal, so two drivers of one stream, on one machine or two, never both write it.

The object `<root>/lease.json` records the holder, its fencing token and when the lease expires.
Taking it is a conditional put against the version just read (`If-None-Match: *` when there is
none, `If-Match: <etag>` otherwise), so of two racing acquirers exactly one wins; the loser gets
`LeaseHeld` naming the winner. A live holder is refused; a lease is free when it was released,
when it expired (its holder stopped renewing it for `ttl_s`), or at once when its holder was a
process of this machine that no longer exists (a SIGKILLed driver restarted where it ran).

No kernel releases the lease when its holder dies on another machine, hence the expiry; and a
holder that stalls past it (a long pause, a network partition) may find its lease taken over
while it still runs. That is what the token is for: every acquisition raises it, and a writer
checks it right before it commits (`Fence.check`), so a deposed writer fails instead of writing.
Hosts' clocks are trusted to agree to well within `ttl_s`.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from elasticity.lease.fence import Lease
from elasticity.lease.holder import Holder, refusal
from elasticity.lease.objects import ConditionFailed, LeaseObjects, Versioned
from elasticity.lease.record import LeaseRecord, lease_object, read_store_record

log = logging.getLogger(__name__)

DEFAULT_TTL_S = 30.0
"""How long a lease outlives its holder's last renewal; renewed every third of it."""


class StoreLease(Lease):
    """A lease on an object store, renewed by a daemon thread until released."""

    def __init__(
        self, root: str, record: LeaseRecord, etag: str, ttl_s: float, objects: LeaseObjects, clock: Callable[[], float]
    ) -> None:
        super().__init__(root, record.holder)
        self.ttl_s = ttl_s
        self._objects, self._clock = objects, clock
        self._where = lease_object(root)
        self._etag = etag
        self._lost = False
        self._released = threading.Event()
        self._renewals = threading.Thread(target=self._renew_until_released, name=f"lease {root}", daemon=True)

    @property
    def lost(self) -> bool:
        """Another writer took the lease over (this one's commits are fenced)."""
        return self._lost

    def start_renewing(self) -> StoreLease:
        self._renewals.start()
        return self

    def renew(self) -> bool:
        """Push the expiry one `ttl_s` ahead; False (and lost) if another writer took it over."""
        if self._lost:
            return False
        record = LeaseRecord(self.holder, self._clock() + self.ttl_s)
        try:
            self._etag = self._objects.replace(*self._where, record.encode(), self._etag)
        except ConditionFailed:
            self._lost = True
            now = read_store_record(self.root, self._objects)
            log.error(
                "the lease of %s was taken over (now %s): this writer's commits are fenced",
                self.root,
                now.holder.describe() if now is not None else "nobody",
            )
            return False
        return True

    def release(self) -> None:
        if self._released.is_set():
            return
        self._released.set()
        if self._renewals.is_alive():
            self._renewals.join()
        if self._lost:
            return
        record = LeaseRecord(self.holder, self._clock(), released=True)
        try:
            self._objects.replace(*self._where, record.encode(), self._etag)
        except ConditionFailed:
            pass  # already taken over: nothing of ours to give up
        except Exception as err:  # noqa: BLE001 - the lease then frees itself when it expires
            log.warning("could not release the lease of %s (%s); it expires within %.0f s", self.root, err, self.ttl_s)

    def _renew_until_released(self) -> None:
        while not self._released.wait(self.ttl_s / 3):
            try:
                if not self.renew():
                    return
            except Exception as err:  # noqa: BLE001 - a store hiccup: the next renewal may pass
                log.warning("renewing the lease of %s failed (%s); retrying", self.root, err)


def acquire_on_store(
    root: str,
    purpose: str,
    ttl_s: float = DEFAULT_TTL_S,
    objects: LeaseObjects | None = None,
    clock: Callable[[], float] = time.time,
) -> StoreLease:
    """Take the lease of the stage at `root` or raise `LeaseHeld` naming the live holder; renewed
    in the background until `release()`."""
    objects = objects or LeaseObjects()
    bucket, key = lease_object(root)
    found = objects.read(bucket, key)
    previous = _refuse_if_live(root, found, clock())
    record = LeaseRecord(Holder.next_after(previous, purpose, clock()), clock() + ttl_s)
    try:
        etag = (
            objects.create(bucket, key, record.encode())
            if found is None
            else objects.replace(bucket, key, record.encode(), found.etag)
        )
    except ConditionFailed:
        etag = _won_anyway(objects, bucket, key, record, root, clock())
    return StoreLease(root, record, etag, ttl_s, objects, clock).start_renewing()


def ensure_free_on_store(
    root: str, objects: LeaseObjects | None = None, clock: Callable[[], float] = time.time
) -> None:
    """Raise `LeaseHeld` naming the holder if a live process holds the stage's lease now."""
    _refuse_if_live(root, (objects or LeaseObjects()).read(*lease_object(root)), clock())


def _refuse_if_live(root: str, found: Versioned | None, now: float) -> Holder | None:
    """The previous holder (for the next token) when the lease is free; LeaseHeld when it is not."""
    record = LeaseRecord.decode(found.data) if found is not None else None
    if record is not None and record.live(now, socket.gethostname()):
        raise refusal(root, record.holder, record.detail(now))
    return record.holder if record is not None else None


def _won_anyway(objects: LeaseObjects, bucket: str, key: str, ours: LeaseRecord, root: str, now: float) -> str:
    """After a refused put: another acquirer won (LeaseHeld naming it), unless the object is ours
    (a put that landed but whose answer was lost, then retried and refused)."""
    found = objects.read(bucket, key)
    record = LeaseRecord.decode(found.data) if found is not None else None
    if found is not None and record is not None and replace(record, expires=ours.expires) == ours:
        return found.etag
    raise refusal(root, record.holder if record is not None else None, record.detail(now) if record else "")
