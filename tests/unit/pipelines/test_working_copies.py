"""Working copies of dead workers, old epochs and removed channels are deleted; live ones never."""

from __future__ import annotations

import os
import subprocess
import sys

from elasticity.state import Location
from pipelines.elastic_stage import StageSpec, WorkerStores
from pipelines.working_copies import sweep


def _copy(root, *parts):
    folder = root.joinpath(*parts)
    folder.mkdir(parents=True)
    (folder / "000001.sst").write_bytes(b"x" * 10)
    return folder


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_sweep_removes_dead_workers_and_unused_copies_but_not_a_live_worker(tmp_path):
    dead = _copy(tmp_path, f"worker-{_dead_pid()}", "e1", "channel=0")
    live_other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = _copy(tmp_path, f"worker-{live_other.pid}", "e1", "channel=0")
        own_old_epoch = _copy(tmp_path, f"worker-{os.getpid()}", "e1", "channel=0")
        own_removed_channel = _copy(tmp_path, f"worker-{os.getpid()}", "e2", "channel=3")
        own_in_use = _copy(tmp_path, f"worker-{os.getpid()}", "e2", "channel=1")
        removed = sweep(str(tmp_path), os.getpid(), [str(own_in_use)])
    finally:
        live_other.kill()
        live_other.wait()
    assert not dead.parent.parent.exists()
    assert not own_old_epoch.exists() and not own_old_epoch.parent.exists()
    assert not own_removed_channel.exists()
    assert live.exists() and own_in_use.exists()
    assert dead.parent.parent in removed


def _worker_stores(tmp_path) -> WorkerStores:
    durable = tmp_path / "durable"
    Location.of(str(durable)).ensure()
    return WorkerStores(StageSpec("s", str(durable), str(tmp_path / "local"), store_kind="rocks"))


def _copies(tmp_path) -> set[str]:
    local = tmp_path / "local"
    return {str(p.relative_to(local)) for p in local.glob("worker-*/e*/channel=*")}


def test_worker_stores_keep_only_the_copies_of_the_layout_in_use(tmp_path):
    stores = _worker_stores(tmp_path)
    me = f"worker-{os.getpid()}"
    for channel in (0, 1, 2):
        stores.store_for(channel, 1, frozenset(), frozenset({0, 1, 2}))
    leftover = _copy(tmp_path / "local", f"worker-{_dead_pid()}", "e1", "channel=0")
    assert _copies(tmp_path) >= {f"{me}/e1/channel=0", f"{me}/e1/channel=2"}

    # Epoch 2 drops channel 2 and adds channel 3: channel 0 is reused (it existed in both), the
    # removed channel's copy and the dead worker's folder go.
    stores.store_for(0, 2, frozenset({0, 1, 2}), frozenset({0, 1, 3}))
    stores.store_for(3, 2, frozenset({0, 1, 2}), frozenset({0, 1, 3}))
    assert _copies(tmp_path) == {f"{me}/e1/channel=0", f"{me}/e1/channel=1", f"{me}/e2/channel=3"}
    assert not leftover.exists()

    # Epoch 4 (the worker missed epoch 3): nothing of epoch 2 can be reused.
    stores.store_for(1, 4, frozenset({1}), frozenset({1}))
    assert _copies(tmp_path) == {f"{me}/e4/channel=1"}
    for entry in stores.cached.values():
        entry.store.close()
