"""Removing RocksDB working copies nobody uses any more.

Each Python worker keeps its channel stores under `<local_dir>/worker-<pid>/e<epoch>/channel=<c>`.
The durable history is the truth; a working copy is a cache, rebuilt from the history when
missing. Without a sweep every worker restart and every epoch leaves one behind for good.

`sweep` runs in a worker when it first opens a store and whenever the layout epoch changes:
- folders of other workers whose pid is no longer alive on this host (a live pid's folder is
  never touched: the local folder is per host, and a pid stays taken while its process lives);
- in the worker's own folder, every working copy it does not hold open (older epochs, channels
  that left the layout): a worker opens its stores itself, one task at a time, so a copy it
  does not hold is one nobody uses.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from elasticity.lease.record import process_exists

log = logging.getLogger(__name__)

WORKER_PREFIX = "worker-"


def worker_folder(local_dir: str, pid: int) -> str:
    return os.path.join(local_dir, f"{WORKER_PREFIX}{pid}")


def sweep(local_dir: str, pid: int, in_use: Iterable[str], alive: Callable[[int], bool] = process_exists) -> list[Path]:
    """Delete the working copies no live worker uses; the folders removed."""
    root = Path(local_dir)
    if "://" in local_dir or not root.is_dir():
        return []
    removed = [folder for folder in _dead_workers(root, pid, alive) if _remove(folder)]
    own = root / f"{WORKER_PREFIX}{pid}"
    keep = {Path(p).resolve() for p in in_use}
    for epoch in sorted(own.glob("e*")) if own.is_dir() else []:
        removed += [copy for copy in epoch.iterdir() if copy.resolve() not in keep and _remove(copy)]
        if not any(epoch.iterdir()) and _remove(epoch):
            removed.append(epoch)
    return removed


def owner_is_dead(owner: str, pid: int, alive: Callable[[int], bool] = process_exists) -> bool:
    """Whether `owner`, the pid in a folder's name, is a process of this host that ended (never
    `pid`, the caller's own)."""
    return owner.isdigit() and int(owner) != pid and not alive(int(owner))


def _dead_workers(root: Path, pid: int, alive: Callable[[int], bool]) -> list[Path]:
    return [
        folder
        for folder in root.glob(f"{WORKER_PREFIX}*")
        if owner_is_dead(folder.name.removeprefix(WORKER_PREFIX), pid, alive)
    ]


def _remove(path: Path) -> bool:
    try:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    except FileNotFoundError:
        return False  # another worker's sweep removed it first
    except OSError as error:
        log.warning("could not remove the stale working copy %s: %s", path, error)
        return False
    return True
