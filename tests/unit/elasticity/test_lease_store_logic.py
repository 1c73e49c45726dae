"""The object-store lease's rules, on an in-memory store with S3's conditional puts: a live holder
is refused, an expired or released lease or one whose holder died on this machine is taken over
with a higher token, of two racing acquirers one wins, renewals keep a lease and notice a takeover.
(The same lease against a real S3 server: test_lease_on_s3.py.)"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace

import pytest

from elasticity.lease.holder import Holder, LeaseHeld
from elasticity.lease.objects import ConditionFailed, LeaseObjects, Versioned
from elasticity.lease.record import LeaseRecord, lease_object
from elasticity.lease.store import acquire_on_store, ensure_free_on_store

ROOT = "s3://bucket/streams/wordcount"


class MemoryObjects(LeaseObjects):
    """S3's three lease calls on a dict, with S3's conditional-put rules."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Versioned] = {}
        self._versions = itertools.count(1)

    def read(self, bucket: str, key: str) -> Versioned | None:
        return self.objects.get((bucket, key))

    def create(self, bucket: str, key: str, data: bytes) -> str:
        if (bucket, key) in self.objects:
            raise ConditionFailed("exists")
        return self._store(bucket, key, data)

    def replace(self, bucket: str, key: str, data: bytes, etag: str) -> str:
        current = self.objects.get((bucket, key))
        if current is None or current.etag != etag:
            raise ConditionFailed("changed")
        return self._store(bucket, key, data)

    def _store(self, bucket: str, key: str, data: bytes) -> str:
        etag = f'"v{next(self._versions)}"'
        self.objects[(bucket, key)] = Versioned(data, etag)
        return etag

    def record(self) -> LeaseRecord:
        found = self.read(*lease_object(ROOT))
        assert found is not None
        decoded = LeaseRecord.decode(found.data)
        assert decoded is not None
        return decoded


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _plant(objects: MemoryObjects, holder: Holder, expires: float, released: bool = False) -> None:
    objects.create(*lease_object(ROOT), LeaseRecord(holder, expires, released).encode())


def _elsewhere(token: int = 4) -> Holder:
    return Holder(token=token, host="another-machine", pid=1234, purpose="stream driver of wordcount", since=900.0)


def test_the_lease_object_sits_in_the_stages_folder_under_either_scheme():
    assert lease_object("s3://bucket/streams/wordcount") == ("bucket", "streams/wordcount/lease.json")
    assert lease_object("s3a://bucket/a/") == ("bucket", "a/lease.json")
    assert lease_object("s3://bucket") == ("bucket", "lease.json")


def test_a_first_acquisition_creates_token_one_and_a_live_holder_elsewhere_is_refused_by_name():
    objects, clock = MemoryObjects(), Clock()
    lease = acquire_on_store(ROOT, "driver", ttl_s=30, objects=objects, clock=clock)
    assert lease.holder.token == 1 and objects.record().expires == clock.now + 30
    objects.objects.clear()
    _plant(objects, _elsewhere(), expires=clock.now + 12)
    with pytest.raises(LeaseHeld) as refused:
        acquire_on_store(ROOT, "second", ttl_s=30, objects=objects, clock=clock)
    message = str(refused.value)
    assert "pid 1234 on another-machine" in message and "lease token 4" in message and "expires in 12 s" in message
    with pytest.raises(LeaseHeld, match="another-machine"):
        ensure_free_on_store(ROOT, objects=objects, clock=clock)


def test_an_expired_lease_is_taken_over_with_the_next_token():
    objects, clock = MemoryObjects(), Clock()
    _plant(objects, _elsewhere(token=7), expires=clock.now + 5)
    clock.now += 5
    ensure_free_on_store(ROOT, objects=objects, clock=clock)  # expired: free
    lease = acquire_on_store(ROOT, "successor", ttl_s=30, objects=objects, clock=clock)
    assert lease.holder.token == 8 and objects.record().holder == lease.holder


def test_a_released_lease_is_free_and_the_token_keeps_rising():
    objects, clock = MemoryObjects(), Clock()
    first = acquire_on_store(ROOT, "first", ttl_s=30, objects=objects, clock=clock)
    first.release()
    assert objects.record().released and objects.record().holder.token == 1  # kept, never deleted
    second = acquire_on_store(ROOT, "second", ttl_s=30, objects=objects, clock=clock)
    assert second.holder.token == 2
    second.release()


def test_a_holder_that_died_on_this_machine_is_replaced_at_once():
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    objects, clock = MemoryObjects(), Clock()
    _plant(objects, replace(_elsewhere(), host=socket.gethostname(), pid=dead_pid), expires=clock.now + 30)
    lease = acquire_on_store(ROOT, "restart", ttl_s=30, objects=objects, clock=clock)
    assert lease.holder.token == 5 and lease.holder.pid == os.getpid()


def test_a_live_holder_on_this_machine_is_refused():
    objects, clock = MemoryObjects(), Clock()
    _plant(objects, replace(_elsewhere(), host=socket.gethostname(), pid=os.getppid()), expires=clock.now + 30)
    with pytest.raises(LeaseHeld, match=f"pid {os.getppid()}"):
        acquire_on_store(ROOT, "second", ttl_s=30, objects=objects, clock=clock)


class RacingObjects(MemoryObjects):
    """Lets `rival` act between an acquirer's read and its conditional put (once)."""

    def __init__(self) -> None:
        super().__init__()
        self.rival: Callable[[MemoryObjects], None] | None = None

    def create(self, bucket: str, key: str, data: bytes) -> str:
        self._let_rival_in()
        return super().create(bucket, key, data)

    def replace(self, bucket: str, key: str, data: bytes, etag: str) -> str:
        self._let_rival_in()
        return super().replace(bucket, key, data, etag)

    def _let_rival_in(self) -> None:
        rival, self.rival = self.rival, None
        if rival is not None:
            rival(self)


@pytest.mark.parametrize("existing", [False, True], ids=["no lease object yet", "expired lease object"])
def test_of_two_racing_acquirers_the_one_that_puts_first_wins(existing):
    clock = Clock()
    rival_holder = replace(_elsewhere(token=1), host="rival-machine")

    def rival_wins(objects: MemoryObjects) -> None:
        where = lease_object(ROOT)
        current = objects.read(*where)
        record = LeaseRecord(rival_holder, clock.now + 30).encode()
        objects.create(*where, record) if current is None else objects.replace(*where, record, current.etag)

    objects = RacingObjects()
    if existing:
        _plant(objects, _elsewhere(token=0), expires=clock.now - 1)
    objects.rival = rival_wins
    with pytest.raises(LeaseHeld, match="rival-machine"):
        acquire_on_store(ROOT, "loser", ttl_s=30, objects=objects, clock=clock)
    assert objects.record().holder == rival_holder


class AnswerLostObjects(MemoryObjects):
    """The first put lands, but its answer is lost and the retry is refused (as a retried
    conditional put is): the acquirer must still find the lease its own."""

    def create(self, bucket: str, key: str, data: bytes) -> str:
        super().create(bucket, key, data)
        raise ConditionFailed("exists (our own first attempt)")


def test_a_put_whose_answer_was_lost_still_wins_the_lease():
    objects, clock = AnswerLostObjects(), Clock()
    lease = acquire_on_store(ROOT, "driver", ttl_s=30, objects=objects, clock=clock)
    assert lease.holder.token == 1 and objects.record().holder == lease.holder
    assert lease.renew()  # the version it holds is the stored one


def test_renewals_keep_the_lease_live_past_its_first_expiry():
    objects, clock = MemoryObjects(), Clock()
    lease = acquire_on_store(ROOT, "driver", ttl_s=30, objects=objects, clock=clock)
    for _ in range(4):
        clock.now += 20
        assert lease.renew()
    assert objects.record().expires == clock.now + 30
    with pytest.raises(LeaseHeld, match="expires in 30 s"):
        ensure_free_on_store(ROOT, objects=objects, clock=clock)


def test_a_deposed_holder_notices_at_its_renewal_and_its_release_leaves_the_new_holder_alone():
    objects, clock = MemoryObjects(), Clock()
    stalled = acquire_on_store(ROOT, "stalled driver", ttl_s=30, objects=objects, clock=clock)
    clock.now += 31  # it stopped renewing: expired
    successor = acquire_on_store(ROOT, "successor", ttl_s=30, objects=objects, clock=clock)
    assert not stalled.renew() and stalled.lost
    stalled.release()
    assert objects.record().holder == successor.holder and not objects.record().released


def test_an_object_that_is_not_a_lease_record_holds_nothing():
    objects, clock = MemoryObjects(), Clock()
    objects.create(*lease_object(ROOT), b"{half")
    lease = acquire_on_store(ROOT, "after corruption", ttl_s=30, objects=objects, clock=clock)
    assert lease.holder.token == 1
