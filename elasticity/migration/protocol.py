"""The rescale protocol of Gedik et al.: donate -> vertical barrier -> collect -> commit.

`Migrator.migrate(new_layout)` moves a stage's state from the committed layout to the next one:

1. **stage**: the new layout is stored and marked pending, which closes the horizontal barrier
   (`LayoutRegistry.routing_layout()` raises until the end);
2. **donate** (parallel over donors): each old channel writes the entries whose owner changes
   to the migration area, one file per (from, to), then its manifest with checksums;
3. **vertical barrier**: every donor's manifest present and every file intact (journal DONATED);
4. **collect** (parallel over the new layout's affected channels): one migration transaction
   per channel ingests what it receives and deletes what it gave away, atomically, versioned by
   the new epoch (re-running it is a no-op);
5. **commit**: the current-layout pointer is renamed to the new epoch (the atomic point);
6. **finalize**: removed channels are dropped, donation files deleted, the barrier reopens.

A journal records every phase. `recover()` after a crash anywhere leaves exactly one committed
layout with every key owned once: committed -> finish; vertical barrier passed -> roll forward
(collect again, commit); otherwise -> roll back (withdraw the epoch's migration records, which
restores every touched channel to its pre-migration version exactly). `rollback()` does the
latter on demand, at any point before commit.

`donate_channel` and `collect_channel` are plain functions so a Spark job can run them inside
tasks (one per channel) while the driver runs the barriers and the commit. A `hook(point)` is
called at named points (listed in `HOOK_POINTS`) — tests use it to SIGKILL the process there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np

from elasticity.layout import Layout
from elasticity.migration.area import BarrierCheck, DonatedFile, MigrationArea
from elasticity.migration.journal import Journal, Phase
from elasticity.migration.plan import MigrationPlan
from elasticity.migration.registry import LayoutRegistry
from elasticity.migration.report import MigrationReport
from elasticity.state.backend import StoreBackend
from elasticity.state.files import Location
from elasticity.state.store import StateStore, TxState

Hook = Callable[[str], None]
RecoveryPolicy = Literal["auto", "forward", "rollback"]
T = TypeVar("T")

# Layouts and migration journals kept after a migration completes (older ones are deleted): enough
# to read any recent request's outcome and to see the last rescales by hand.
KEEP_EPOCHS = 32

HOOK_POINTS = (
    "staged",  # new layout stored, barrier closed
    "planned",  # journal PLANNED
    "donate:file:<from>-><to>",  # one donation file published
    "donate:manifest:<from>",  # a donor finished
    "donated",  # vertical barrier passed and journaled
    "collect:prepared:<channel>",  # migration record durable, not yet applied
    "collect:applied:<channel>",  # applied to the working set
    "collected",  # every collector done, journaled
    "committed",  # current-layout pointer renamed, journal not yet written
    "finalize:dropped:<channel>",  # a removed channel's state deleted
    "complete",  # journal COMPLETE, barrier about to reopen
    "rollback:dropped:<channel>",  # an added channel's partial state deleted
    "rollback:withdrawn:<channel>",  # a channel's migration record withdrawn, state restored
    "rollback:donations-removed",  # migration area emptied, journal not yet ROLLED_BACK
)


class MigrationError(RuntimeError):
    """A migration that cannot start or continue (wrong epoch, one already pending, ...)."""


@dataclass(frozen=True)
class RecoveryResult:
    action: Literal["nothing", "finished", "rolled_forward", "rolled_back"]
    epoch: int | None
    committed_epoch: int


@dataclass(frozen=True)
class RecordedOutcome:
    """The journaled end of one migration: committed, or rolled back with the error that failed it."""

    epoch: int
    committed: bool
    error: str | None


def _no_hook(point: str) -> None:
    return None


def donate_channel(
    plan: MigrationPlan, area: MigrationArea, store: StateStore, hook: Hook = _no_hook
) -> list[DonatedFile]:
    """Write what `store`'s channel gives away under `plan`; skip if its manifest is intact."""
    source = store.channel
    targets = plan.targets_of(source)
    if not area.donor_problems(source, targets):
        return area.manifest(source) or []
    by_target = plan.outgoing(source)
    ranges = sorted((r, target) for target, rs in by_target.items() for r in rs)
    entries = store.entries([r for r, _ in ranges])  # one ordered scan over all outgoing ranges
    starts = np.array([r[0] for r, _ in ranges], dtype=np.int64)
    range_target = np.array([t for _, t in ranges], dtype=np.int64)
    owner = range_target[np.searchsorted(starts, entries["hash"].to_numpy(), side="right") - 1]
    files = []
    for target in targets:
        donated = area.write_donation(source, target, entries.filter(owner == target))
        hook(f"donate:file:{source}->{target}")
        files.append(donated)
    area.write_manifest(source, files)
    hook(f"donate:manifest:{source}")
    return files


def collect_channel(plan: MigrationPlan, area: MigrationArea, store: StateStore, hook: Hook = _no_hook) -> bool:
    """Ingest what `store`'s channel receives and delete what it gave, as one transaction of
    epoch `plan.epoch`. Returns False if that transaction was already applied."""
    channel = store.channel
    tx = store.begin_migration(plan.epoch)
    if tx.is_replay:
        tx.abort()
        return False
    try:
        # A channel holds only keys of its own ranges: what it receives is new to it, and what
        # it gave was read from it.
        tx.put_entries(area.incoming(channel, plan.sources_for(channel)), absent=True)
        vacated = sorted(r for ranges in plan.outgoing(channel).values() for r in ranges)
        tx.delete_entries(area.outgoing(channel, plan.targets_of(channel)), present=True, vacated=vacated)
        tx.prepare()
        hook(f"collect:prepared:{channel}")
        tx.commit()
    except BaseException:
        # An in-process failure withdraws the record (a killed process leaves it prepared,
        # and the store's sync replays it): either way the channel is all-or-nothing.
        if tx.state in (TxState.STARTED, TxState.PREPARED):
            tx.abort()
        raise
    hook(f"collect:applied:{channel}")
    return True


class Migrator:
    """Runs, recovers and rolls back migrations of one elastic stage's state."""

    def __init__(
        self,
        root: Location | str,
        backend: StoreBackend,
        *,
        hook: Hook = _no_hook,
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
        max_workers: int = 4,
        count_keys: bool = True,
        fence: Callable[[], None] | None = None,
        keep_epochs: int = KEEP_EPOCHS,
    ) -> None:
        self.root = root if isinstance(root, Location) else Location.of(root)
        self.backend = backend
        self.registry = LayoutRegistry(self.root)
        self._hook = hook
        self._clock = clock
        self._wall_clock = wall_clock
        self._max_workers = max_workers
        self._count_keys = count_keys
        # Checked before every layout write (stage, commit, rollback): one writer per stage.
        self._fence = fence or (lambda: None)
        self._keep_epochs = keep_epochs

    # ---- public API ---------------------------------------------------------------------------
    def migrate(self, new: Layout, *, allow_rebalance: bool = False, request_id: str | None = None) -> MigrationReport:
        """Move state from the committed layout to `new`, whose epoch must be `registry.next_epoch()`.

        `request_id` is recorded in the journal, so whoever asked can learn the outcome after a
        crash (`recorded_outcome`) instead of asking again."""
        pending = self.registry.pending()
        if pending is not None:
            raise MigrationError(f"migration to epoch {pending} is unfinished; call recover() first")
        old = self.registry.committed()
        if new.epoch != (expected := self.registry.next_epoch()):
            raise MigrationError(f"next layout must have epoch {expected} (epochs are never reused), got {new.epoch}")
        plan = MigrationPlan.between(old, new)
        if plan.unexpected_moves() and not allow_rebalance:
            raise MigrationError(f"non-monotone layout change: {plan.unexpected_moves()[:3]} ...")
        report = MigrationReport(
            old.epoch,
            new.epoch,
            str(new.origin.get("op", "custom")),
            old.n_channels,
            new.n_channels,
            ideal_fraction=plan.ideal_fraction,
            ring_fraction=plan.ring_fraction,
        )
        if self._count_keys:
            report.keys_total = sum(len(self.backend.open(c)) for c in old.channels)
        area, journal = self._area_and_journal(new.epoch)
        with self._timed(report, "plan"):
            self._fence()
            self.registry.stage(new)
            self._hook("staged")
            for stale in plan.added:  # leftovers of an earlier channel with the same id
                self.backend.drop(stale)
            journal.record(
                Phase.PLANNED,
                old_epoch=old.epoch,
                ranges=len(plan.ranges),
                op=report.operation,
                request_id=request_id,
                rebalance=bool(plan.unexpected_moves()),
            )
            self._hook("planned")
        try:
            self._donate_and_barrier(plan, area, journal, report)
            self._collect(plan, area, journal, report)
        except BaseException as error:
            journal.record(Phase.FAILED, error=repr(error))
            raise
        self._commit_and_finalize(plan, area, journal, report)
        return report

    def recover(self, policy: RecoveryPolicy = "auto") -> RecoveryResult:
        """Bring the stage back to exactly one committed layout after a crash anywhere.

        Called by the stage's one writer before it writes (a stream's start, an offline
        rescale), so the temporaries of crashed writers are removed here too."""
        self.root.clean_temporaries()
        epoch = self.registry.pending()
        if epoch is None:
            return RecoveryResult("nothing", None, self.registry.committed().epoch)
        committed = self.registry.committed()
        area, journal = self._area_and_journal(epoch)
        if committed.epoch == epoch:
            if not journal.has(Phase.COMMITTED):
                # Killed between the commit point and its journal record: the journal must still
                # say so, for whoever counts the committed migrations of each request.
                journal.record(Phase.COMMITTED, recovered=True)
            previous = self.registry.previous()
            assert previous is not None, "a committed migration always has a previous layout"
            self._finalize(MigrationPlan.between(previous, committed), area, journal)
            return RecoveryResult("finished", epoch, epoch)
        new = self.registry.load(epoch)
        plan = MigrationPlan.between(committed, new)
        # A rollback that was under way must finish: it may already have withdrawn records or
        # deleted donations, so going forward could lose keys.
        rolling_back = journal.has(Phase.ROLLING_BACK)
        barrier_passed = journal.has(Phase.DONATED) and self._barrier(plan, area).passed
        if not rolling_back and (policy == "forward" or (policy == "auto" and barrier_passed)):
            journal.record(Phase.RECOVERING, policy=policy)
            scratch = MigrationReport(committed.epoch, epoch, "recovery", committed.n_channels, new.n_channels)
            if not barrier_passed:
                self._donate_and_barrier(plan, area, journal, scratch)
            self._collect(plan, area, journal, scratch)
            self._commit_and_finalize(plan, area, journal, scratch)
            return RecoveryResult("rolled_forward", epoch, epoch)
        self._rollback(plan, area, journal)
        return RecoveryResult("rolled_back", epoch, committed.epoch)

    def recorded_outcome(self, request_id: str, epoch: int) -> RecordedOutcome | None:
        """What became of the migration `request_id` asked for at `epoch`: None if it never
        started there (or is still pending), else committed or rolled back (with its error)."""
        entries = self._area_and_journal(epoch)[1].entries()
        if not entries or entries[0].get("request_id") != request_id:
            return None
        phases = {entry["phase"] for entry in entries}
        errors = [entry["error"] for entry in entries if entry["phase"] == Phase.FAILED and "error" in entry]
        if Phase.COMMITTED in phases or Phase.COMPLETE in phases:
            return RecordedOutcome(epoch, committed=True, error=None)
        if Phase.ROLLED_BACK in phases:
            return RecordedOutcome(epoch, committed=False, error=errors[-1] if errors else "rolled back")
        return None

    def rollback(self) -> RecoveryResult:
        """Abandon the pending migration, restoring every channel to its pre-migration state."""
        if self.registry.pending() is None:
            raise MigrationError("no migration is pending")
        return self.recover("rollback")

    # ---- phases -------------------------------------------------------------------------------
    def _donate_and_barrier(
        self, plan: MigrationPlan, area: MigrationArea, journal: Journal, report: MigrationReport
    ) -> None:
        with self._timed(report, "donate"):
            journal.record(Phase.DONATING, donors=plan.donors)
            donations = self._parallel(
                lambda c: donate_channel(plan, area, self.backend.open(c), self._hook), plan.donors
            )
        report.keys_moved = sum(f.rows for files in donations for f in files)
        report.bytes_moved = sum(f.bytes for files in donations for f in files)
        with self._timed(report, "vertical_barrier"):
            check = self._barrier(plan, area)
            if not check.passed:
                raise MigrationError(f"vertical barrier failed: {list(check.problems)[:5]}")
            journal.record(Phase.DONATED, keys=report.keys_moved, bytes=report.bytes_moved)
            self._hook("donated")

    def _collect(self, plan: MigrationPlan, area: MigrationArea, journal: Journal, report: MigrationReport) -> None:
        with self._timed(report, "collect"):
            journal.record(Phase.COLLECTING, collectors=plan.collectors)
            self._parallel(lambda c: collect_channel(plan, area, self.backend.open(c), self._hook), plan.collectors)
            journal.record(Phase.COLLECTED)
            self._hook("collected")

    def _commit_and_finalize(
        self, plan: MigrationPlan, area: MigrationArea, journal: Journal, report: MigrationReport
    ) -> None:
        with self._timed(report, "commit"):
            self._fence()
            self.registry.commit(plan.epoch)
            self._hook("committed")
            journal.record(Phase.COMMITTED)
        with self._timed(report, "finalize"):
            self._finalize(plan, area, journal)

    def _finalize(self, plan: MigrationPlan, area: MigrationArea, journal: Journal) -> None:
        for channel in plan.removed:
            self.backend.drop(channel)
            self._hook(f"finalize:dropped:{channel}")
        area.remove_donations()
        if not journal.is_finished():
            journal.record(Phase.COMPLETE)
        self._hook("complete")
        self.registry.clear_pending()
        self.registry.forget_old_epochs(self._keep_epochs)

    def _rollback(self, plan: MigrationPlan, area: MigrationArea, journal: Journal) -> None:
        self._fence()
        journal.record(Phase.ROLLING_BACK)
        for channel in plan.added:
            self.backend.drop(channel)
            self._hook(f"rollback:dropped:{channel}")
        kept = [c for c in plan.collectors if c not in plan.added]
        self._parallel(lambda c: self._withdraw(c, plan.epoch), kept)
        area.remove_donations()
        self._hook("rollback:donations-removed")
        journal.record(Phase.ROLLED_BACK)
        self.registry.clear_pending()
        self.registry.discard(plan.epoch)

    # ---- helpers ------------------------------------------------------------------------------
    @staticmethod
    def _barrier(plan: MigrationPlan, area: MigrationArea) -> BarrierCheck:
        return area.vertical_barrier({d: plan.targets_of(d) for d in plan.donors})

    def _area_and_journal(self, epoch: int) -> tuple[MigrationArea, Journal]:
        area = MigrationArea(self.root, epoch)
        return area, Journal(area.journal_location, self._wall_clock)

    def _parallel(self, fn: Callable[[int], T], channels: Sequence[int]) -> list[T]:
        if len(channels) <= 1 or self._max_workers <= 1:
            return [fn(c) for c in channels]
        with ThreadPoolExecutor(max_workers=min(self._max_workers, len(channels))) as pool:
            return list(pool.map(fn, channels))

    @contextmanager
    def _timed(self, report: MigrationReport, phase: str) -> Iterator[None]:
        start = self._clock()
        try:
            yield
        finally:
            report.phase_ms[phase] = report.phase_ms.get(phase, 0.0) + (self._clock() - start) * 1000.0

    def _withdraw(self, channel: int, epoch: int) -> None:
        _withdraw_migration(self.backend.open(channel), epoch)
        self._hook(f"rollback:withdrawn:{channel}")


def _withdraw_migration(store: StateStore, epoch: int) -> None:
    """Delete the channel's durable records of migration `epoch` and rebuild its working set
    from what remains: exactly its pre-migration state (no batch ran in between)."""
    for version in store.history.changelog_versions():
        if version.migration >= epoch:
            store.history.remove_changelog(version)
    for version in store.history.snapshot_versions():
        if version.migration >= epoch:
            store.history.remove_snapshot(version)
    store.sync()
