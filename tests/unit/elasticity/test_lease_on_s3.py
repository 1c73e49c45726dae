"""One writer per stage on an object store, against a real S3-compatible server (moto's, fixture
`s3_root`): a second writer is refused naming the holder, a SIGKILLed holder is replaced at once
on its machine and after the lease's expiry from another, renewals keep a live holder's lease,
a deposed writer's fence stops its commits, and of writers racing for the lease one wins."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from elasticity.layout import Layout
from elasticity.lease import Fence, FencedOut, LeaseHeld, acquire, ensure_free, read_holder
from elasticity.migration import LayoutRegistry, Migrator
from elasticity.state import Int64Codec, Location, MemoryBackend

HOLDER = textwrap.dedent(
    """
    import socket, sys, time
    if sys.argv[3] != "-":
        socket.gethostname = lambda: sys.argv[3]  # a holder on another machine
    from elasticity.lease import acquire, read_holder
    if len(sys.argv) > 4:  # a race: every racer's client ready, then all go at one instant
        read_holder(sys.argv[1])
        time.sleep(max(0.0, float(sys.argv[4]) - time.time()))
    try:
        lease = acquire(sys.argv[1], "test holder", ttl_s=float(sys.argv[2]))
    except Exception as refused:
        print("refused", flush=True)
        time.sleep(600)
    print(lease.holder.token, flush=True)
    time.sleep(600)
    """
)


def _holder_process(root: str, ttl_s: float = 30, host: str = "-") -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, root, str(ttl_s), host], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def _kill(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.wait()


def test_a_second_writer_is_refused_naming_the_holder(s3_root):
    process, token = _holder_process(s3_root)
    try:
        with pytest.raises(LeaseHeld) as refused:
            acquire(s3_root, "second")
        assert f"pid {process.pid}" in str(refused.value) and f"lease token {token}" in str(refused.value)
        with pytest.raises(LeaseHeld, match=f"pid {process.pid}"):
            ensure_free(s3_root.replace("s3://", "s3a://"))  # Spark's spelling names the same lease
    finally:
        _kill(process)


def test_a_sigkilled_holder_is_replaced_at_once_on_its_machine_and_its_fence_is_down(s3_root):
    process, token = _holder_process(s3_root)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    lease = acquire(s3_root, "restarted driver")
    try:
        assert lease.holder.token == token + 1 and read_holder(s3_root) == lease.holder
        lease.fence.check()
        with pytest.raises(FencedOut, match="no longer current"):
            Fence(s3_root, token).check()
    finally:
        lease.release()


def test_a_holder_on_another_machine_blocks_until_its_lease_expires(s3_root):
    process, token = _holder_process(s3_root, ttl_s=3, host="another-machine")
    _kill(process)  # it can no longer renew; nothing on this machine can tell it is dead
    with pytest.raises(LeaseHeld, match="another-machine.*expires in"):
        acquire(s3_root, "successor")
    deadline = time.monotonic() + 10
    while True:
        try:
            lease = acquire(s3_root, "successor")
            break
        except LeaseHeld:
            assert time.monotonic() < deadline, "the dead holder's lease never expired"
            time.sleep(0.3)
    assert lease.holder.token == token + 1
    lease.release()


def test_a_live_holder_renews_its_lease_past_its_expiry(s3_root):
    process, token = _holder_process(s3_root, ttl_s=2, host="another-machine")
    try:
        time.sleep(5)  # more than two expiries: only renewals keep it
        with pytest.raises(LeaseHeld, match=f"lease token {token}"):
            acquire(s3_root, "usurper")
    finally:
        _kill(process)


def test_a_fenced_migrator_writes_no_layout_on_the_store(s3_root):
    backend = MemoryBackend(Int64Codec(), durable=s3_root)
    layout = Layout.uniform(2)
    LayoutRegistry(Location.of(s3_root)).initialize(layout)
    stale = acquire(s3_root, "driver")
    stale.release()
    successor = acquire(s3_root, "new driver")
    try:
        with pytest.raises(FencedOut):
            Migrator(Location.of(s3_root), backend, fence=stale.fence.check).migrate(layout.scale_out(1))
        registry = LayoutRegistry(Location.of(s3_root))
        assert registry.pending() is None and registry.committed() == layout
    finally:
        successor.release()


def test_of_writers_racing_for_the_lease_exactly_one_wins(s3_root):
    start_at = str(time.time() + 8)
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", HOLDER, s3_root, "30", "-", start_at], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    try:
        answers = [racer.stdout.readline().strip() for racer in racers if racer.stdout is not None]
        winners = [answer for answer in answers if answer != "refused"]
        assert len(winners) == 1, answers
        assert read_holder(s3_root).token == int(winners[0])
    finally:
        for racer in racers:
            _kill(racer)


def test_the_fence_reads_the_lease_without_boto3(s3_root):
    """An executor's Python worker checks the fence before every commit: through pyarrow, which
    it has loaded, not boto3, whose import costs a fresh worker about a second."""
    lease = acquire(s3_root, "driver")
    try:
        check = textwrap.dedent(
            f"""
            import sys
            from elasticity.lease import Fence
            Fence({s3_root!r}, {lease.holder.token}).check()
            print("boto3" in sys.modules)
            """
        )
        answer = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
        assert answer.stdout.strip() == "False"
    finally:
        lease.release()


def test_the_live_holder_on_the_store_is_the_holder_of_a_live_lease(s3_root):
    from elasticity.lease import live_holder

    assert live_holder(s3_root) is None
    lease = acquire(s3_root, "driver")
    assert live_holder(s3_root) == lease.holder
    lease.release()
    assert live_holder(s3_root) is None  # released: the object stays, nobody holds it
