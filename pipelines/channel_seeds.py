"""Seeds: a channel's working copy rebuilt by one Python worker, offered to the host's others.

Each Python worker keeps its own RocksDB working copy of every channel it ran
(`pipelines.elastic_stage.WorkerStores`), and Spark gives a channel's task to whichever worker
is idle. So after a rescale, every worker that met a new channel rebuilt it from the durable
history, key by key: at 1e7 keys the new channel's 2M keys took 1.3–1.6 s, once per worker, and
the batch after the rescale took 3.3 s where a normal one took 1.4 s.

Now the first worker to rebuild a channel leaves a RocksDB checkpoint of it (hard links, no copy
of the data) under `<local_dir>/seeds/p<daemon>/e<epoch>/channel=<c>`. A worker that meets the channel
later clones the seed (links again) and its `sync()` replays the batches since from the history:
milliseconds instead of seconds.

A seed is a cache, like a working copy: the durable history stays the truth. It is shared only
by the workers of one worker daemon (one executor's life: `seeds/p<daemon pid>/...`), so a
restarted stream or executor recovers from its durable history exactly as before, and only in
its own layout epoch (a migration changes a channel through its history, and a worker that
missed an epoch rebuilds, as with its own copies); `sync()` replays what a clone lacks, or
rebuilds if the history moved away from it. A seed appears whole or not at all (checkpointed
into a temporary folder, then renamed), and a clone that fails is removed before the worker
rebuilds from the history as before. The checkpoint runs in a thread of the worker, after the
rebuild, so the batch that rebuilt does not wait for its flush.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from elasticity.state import RocksStore
from elasticity.state.backend import channel_dir_name
from elasticity.state.rocks import clone_working_copy
from pipelines.working_copies import owner_is_dead

log = logging.getLogger(__name__)

SEEDS_FOLDER = "seeds"
_PLANTING_PREFIX = ".planting-"


@dataclass
class ChannelSeeds:
    """One Python worker's view of its host's seeds under `local_dir`."""

    local_dir: str
    _planting: dict[int, threading.Thread] = field(default_factory=dict)
    """Checkpoints in progress, by the id of the store they copy."""

    @property
    def _daemon_folder(self) -> Path:
        # The process that forked this worker: Spark's worker daemon of this executor.
        return Path(self.local_dir) / SEEDS_FOLDER / f"p{os.getppid()}"

    def _epoch_folder(self, epoch: int) -> Path:
        return self._daemon_folder / f"e{epoch}"

    def seed_of(self, epoch: int, channel: int) -> Path:
        return self._epoch_folder(epoch) / channel_dir_name(channel)

    def clone(self, epoch: int, channel: int, working_copy: str) -> bool:
        """Make `working_copy` (a folder that must not exist yet) a clone of the channel's seed;
        False (and nothing left behind) when there is none or it cannot be cloned."""
        seed = self.seed_of(epoch, channel)
        if os.path.exists(working_copy) or not seed.is_dir():
            return False
        try:
            clone_working_copy(str(seed), working_copy)
        except OSError as error:  # the seed swept meanwhile, a full disk...: rebuild instead
            log.info("channel %d: seed %s not cloned (%s); rebuilding from the history", channel, seed, error)
            shutil.rmtree(working_copy, ignore_errors=True)
            return False
        return True

    def plant(self, store: RocksStore, epoch: int) -> None:
        """Checkpoint `store` as its channel's seed of `epoch`, in a thread (`wait` before closing it)."""
        self.wait(store)  # one checkpoint of a store at a time: `wait` joins the newest only
        thread = threading.Thread(target=self._plant, args=(store, epoch), name=f"seed-{store.channel}", daemon=True)
        self._planting[id(store)] = thread
        thread.start()

    def _plant(self, store: RocksStore, epoch: int) -> None:
        seed = self.seed_of(epoch, store.channel)
        temporary = seed.parent / f"{_PLANTING_PREFIX}{os.getpid()}-{store.channel}"
        try:
            seed.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(temporary, ignore_errors=True)
            store.checkpoint(str(temporary))
            os.rename(temporary, seed)  # refused if another worker's seed is there: keep that one
        except Exception as error:  # a seed only saves other workers a rebuild
            log.info("channel %d: no seed planted (%s)", store.channel, error)
            shutil.rmtree(temporary, ignore_errors=True)

    def wait(self, store: RocksStore) -> None:
        """Return once no checkpoint of `store` runs (before it is closed)."""
        thread = self._planting.pop(id(store), None)
        if thread is not None:
            thread.join()

    def sweep(self, epoch: int) -> None:
        """Remove the seeds of dead daemons and of other epochs, and the checkpoints dead workers
        left half made."""
        root = Path(self.local_dir) / SEEDS_FOLDER
        if not root.is_dir():
            return
        for daemon in root.iterdir():
            if daemon != self._daemon_folder and owner_is_dead(daemon.name.removeprefix("p"), os.getpid()):
                shutil.rmtree(daemon, ignore_errors=True)
        if not self._daemon_folder.is_dir():
            return
        for folder in self._daemon_folder.iterdir():
            if folder.name != f"e{epoch}":
                shutil.rmtree(folder, ignore_errors=True)
                continue
            for leftover in folder.glob(f"{_PLANTING_PREFIX}*"):
                if owner_is_dead(leftover.name.removeprefix(_PLANTING_PREFIX).split("-", 1)[0], os.getpid()):
                    shutil.rmtree(leftover, ignore_errors=True)
