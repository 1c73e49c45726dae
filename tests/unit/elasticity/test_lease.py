"""One writer per stage: the lease refuses a second live writer, is taken over from a dead one,
and its fence stops a deposed writer's commits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from elasticity.layout import Layout
from elasticity.lease import LEASE_FILE, FencedOut, LeaseHeld, acquire, ensure_free, live_holder, read_holder
from elasticity.migration import LayoutRegistry, Migrator
from elasticity.state import Int64Codec, Location, MemoryBackend

HOLDER = textwrap.dedent(
    """
    import sys, time
    from elasticity.lease import acquire
    lease = acquire(sys.argv[1], "test holder")
    print(lease.holder.token, flush=True)
    time.sleep(600)
    """
)


def _holder_process(root) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdout=subprocess.PIPE, text=True)
    token = int(process.stdout.readline())
    return process, token


def test_a_second_writer_is_refused_with_the_holder_named(tmp_path):
    process, token = _holder_process(tmp_path)
    try:
        with pytest.raises(LeaseHeld) as refused:
            acquire(str(tmp_path), "second")
        assert f"pid {process.pid}" in str(refused.value) and "test holder" in str(refused.value)
        assert f"lease token {token}" in str(refused.value)
    finally:
        process.kill()
        process.wait()


def test_the_quick_check_refuses_while_held_and_takes_nothing_when_free(tmp_path):
    process, token = _holder_process(tmp_path)
    try:
        with pytest.raises(LeaseHeld, match=f"pid {process.pid}"):
            ensure_free(str(tmp_path))
    finally:
        process.kill()
        process.wait()
    ensure_free(str(tmp_path))  # the holder died: free
    assert read_holder(tmp_path).token == token  # checking raised no token
    lease = acquire(str(tmp_path), "after the check")
    assert lease is not None and lease.holder.token == token + 1
    lease.release()


def test_a_dead_holders_lease_is_taken_over_with_a_new_token(tmp_path):
    process, token = _holder_process(tmp_path)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    lease = acquire(str(tmp_path), "successor")
    assert lease is not None and lease.holder.token == token + 1
    assert read_holder(tmp_path).pid == os.getpid()
    lease.release()


def test_a_released_lease_is_free_and_the_fence_of_the_old_holder_is_down(tmp_path):
    first = acquire(str(tmp_path), "first")
    assert first is not None
    first.fence.check()
    first.release()
    second = acquire(str(tmp_path), "second")
    assert second is not None
    with pytest.raises(FencedOut, match="no longer current"):
        first.fence.check()
    second.fence.check()
    second.release()


def test_a_fenced_migrator_writes_no_layout(tmp_path):
    root = str(tmp_path / "stage")
    backend = MemoryBackend(Int64Codec(), durable=root)
    layout = Layout.uniform(2)
    LayoutRegistry(Location.of(root)).initialize(layout)
    lease = acquire(root, "driver")
    assert lease is not None
    stale = lease.fence
    lease.release()
    acquire(root, "new driver")  # another writer took over (and keeps it)
    with pytest.raises(FencedOut):
        Migrator(root, backend, fence=stale.check).migrate(layout.scale_out(1))
    registry = LayoutRegistry(Location.of(root))
    assert registry.pending() is None and registry.committed() == layout


def test_a_corrupt_lease_file_is_taken_as_no_holder(tmp_path):
    (tmp_path / LEASE_FILE).write_text("{half")
    lease = acquire(str(tmp_path), "after corruption")
    assert lease is not None and lease.holder.token == 1
    lease.release()


def test_the_live_holder_is_the_recorded_one_while_its_process_exists(tmp_path):
    assert live_holder(str(tmp_path)) is None  # never leased
    process, token = _holder_process(tmp_path)
    try:
        holder = live_holder(str(tmp_path))
        assert holder is not None and holder.pid == process.pid and holder.token == token
        lease = None
        with pytest.raises(LeaseHeld):  # looking took nothing: the lease is still the holder's
            lease = acquire(str(tmp_path), "second")
        assert lease is None
    finally:
        process.kill()
        process.wait()
    assert live_holder(str(tmp_path)) is None  # the file still names it; its process is gone


def test_a_released_local_lease_has_no_live_holder_though_its_process_lives_on(tmp_path):
    lease = acquire(str(tmp_path), "offline rescale")
    assert live_holder(str(tmp_path)) == lease.holder
    lease.release()
    assert live_holder(str(tmp_path)) is None
