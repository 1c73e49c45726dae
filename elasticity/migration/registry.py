"""The layout registry: which layout epoch is committed, and the horizontal barrier.

    <root>/layout/epoch=<E>.json   every layout staged and not rolled back
    <root>/layout/current.json     pointer {"epoch": E, "previous": P}: the committed layout
                                   (atomic rename) and the one it replaced
    <root>/layout/pending.json     {"epoch": E'} while a migration to E' is in flight

Epochs are never reused: a rolled-back migration's epoch keeps its journal under
`<root>/migrations/epoch=<E>/`, and `next_epoch()` is above every epoch ever used, so a later
crash is never judged by an earlier attempt's journal.

A committed layout is checked before it is used: its epoch must match its file name, and, past
the first layout, its lineage: the pointer's previous epoch is below it, and the migration
journal of its epoch records a migration planned from that previous epoch that got at least as
far as collecting (the pointer moves only after that), and, unless that migration was a
deliberate rebalance, the layout is a monotone successor of the previous one. A layout written
or renamed by hand, or a pointer edited to name another epoch, is refused as `CorruptFile`.

The router of the stream reads `routing_layout()` before each micro-batch. That call is the
*horizontal barrier* of Gedik et al.: it raises `RescaleInProgress` while a migration is
pending, so no batch is ever routed by a layout whose state has not been collected and
committed; once the pointer moves, the next batch routes by the new layout.
"""

from __future__ import annotations

import json

from elasticity.layout import Layout
from elasticity.migration.journal import Journal, Phase
from elasticity.migration.plan import MigrationPlan
from elasticity.state.files import CorruptFile, Location

_CURRENT = "current.json"
_PENDING = "pending.json"


class RescaleInProgress(RuntimeError):
    """A migration is in flight: the stream must wait (or run `recover()` after a crash)."""

    def __init__(self, epoch: int) -> None:
        super().__init__(f"migration to layout epoch {epoch} is in progress; batches must wait")
        self.epoch = epoch


class RegistryError(RuntimeError):
    """The registry has no committed layout, or a document is missing."""


def _epoch_file(epoch: int) -> str:
    return f"epoch={epoch:010d}.json"


def _journal_folder(epoch: int) -> str:
    """The migration area's folder name (see `elasticity.migration.area`)."""
    return f"epoch={epoch:010d}"


class LayoutRegistry:
    """Committed and staged layouts of one elastic stage, on any pyarrow filesystem."""

    def __init__(self, root: Location) -> None:
        self.location = root.child("layout")
        self._migrations = root.child("migrations")
        # (epoch, previous) pairs whose lineage was checked: committed() runs before every batch.
        self._lineage_checked: set[tuple[int, int]] = set()

    def initialize(self, layout: Layout) -> Layout:
        """Commit `layout` as the first layout, unless one is already committed (then return it)."""
        if self.location.exists(_CURRENT):
            return self.committed()
        self.location.publish_bytes(_epoch_file(layout.epoch), layout.to_json().encode())
        self._point(_CURRENT, layout.epoch)
        return layout

    def committed(self) -> Layout:
        """The committed layout, checked against its file name and the epoch it replaced."""
        if not self.location.exists(_CURRENT):
            raise RegistryError(f"no committed layout under {self.location.path}")
        pointer = self.location.read_json(_CURRENT)
        layout = self.load(int(pointer["epoch"]))
        previous = pointer.get("previous")
        if previous is not None and (layout.epoch, int(previous)) not in self._lineage_checked:
            self._check_lineage(layout, int(previous))
            self._lineage_checked.add((layout.epoch, int(previous)))
        return layout

    def _check_lineage(self, layout: Layout, previous: int) -> None:
        """CorruptFile unless `layout` came from a migration off epoch `previous` (see the module doc)."""
        if previous >= layout.epoch:
            raise CorruptFile(
                self.location.file(_CURRENT),
                f"it names epoch {layout.epoch} as the successor of epoch {previous}, but epochs only grow",
            )
        layout_file = self.location.file(_epoch_file(layout.epoch))
        journal = Journal(self._migrations.child(_journal_folder(layout.epoch), "journal"), lambda: 0.0)
        planned = next((e for e in journal.entries() if e.get("phase") == Phase.PLANNED), None)
        if planned is None or planned.get("old_epoch") != previous:
            raise CorruptFile(
                layout_file,
                f"no migration from the previous epoch {previous} is journaled for it",
                "a layout is committed only by a migration; this one was written or renamed by hand",
            )
        if not journal.has(Phase.COLLECTED):
            raise CorruptFile(
                layout_file,
                f"its migration from epoch {previous} never finished collecting, yet the pointer names it",
            )
        if not planned.get("rebalance") and MigrationPlan.between(self.load(previous), layout).unexpected_moves():
            raise CorruptFile(
                layout_file,
                f"it is not a successor of epoch {previous}: hash ranges move between channels kept in both",
            )

    def load(self, epoch: int) -> Layout:
        name = _epoch_file(epoch)
        if not self.location.exists(name):
            raise RegistryError(f"layout epoch {epoch} was never staged")
        layout = Layout.from_dict(self.location.read_json(name))
        if layout.epoch != epoch:
            raise CorruptFile(self.location.file(name), f"it holds the layout of epoch {layout.epoch}")
        return layout

    def routing_layout(self) -> Layout:
        """The horizontal barrier: the layout to route the next batch by, or RescaleInProgress."""
        pending = self.pending()
        if pending is not None:
            raise RescaleInProgress(pending)
        return self.committed()

    def pending(self) -> int | None:
        return self._read_pointer(_PENDING) if self.location.exists(_PENDING) else None

    def stage(self, layout: Layout) -> None:
        """Store the next layout and mark a migration to it as pending (closes the barrier)."""
        self.location.publish_bytes(_epoch_file(layout.epoch), layout.to_json().encode())
        self._point(_PENDING, layout.epoch)

    def commit(self, epoch: int) -> None:
        """Atomically make `epoch` the committed layout (one rename)."""
        self.load(epoch)  # refuse to point at a layout that is not there
        current = self._read_pointer(_CURRENT)
        if current != epoch:
            self._point(_CURRENT, epoch, previous=current)

    def previous(self) -> Layout | None:
        """The layout the committed one replaced (None for the first layout)."""
        previous = self.location.read_json(_CURRENT).get("previous")
        return None if previous is None else self.load(int(previous))

    def next_epoch(self) -> int:
        """The epoch the next migration must use: above every epoch ever staged or journaled."""
        staged = self._staged_epochs()
        journaled = [
            int(name.split("=", 1)[1])
            for name in self._migrations.names()
            if name.startswith("epoch=") and self._migrations.child(name, "journal").names()
        ]
        pointed = [self._read_pointer(name) for name in (_CURRENT, _PENDING) if self.location.exists(name)]
        return max([*staged, *journaled, *pointed], default=-1) + 1

    def forget_old_epochs(self, keep: int) -> list[int]:
        """Delete the layout files and migration folders (journals included) of every epoch but
        the `keep` newest, never the committed one, the one it replaced or a pending one; the
        epochs forgotten. A stream that rescales every minute would otherwise keep a journal
        and a layout per rescale forever. `next_epoch()` stays above every epoch ever used,
        since the newest are kept."""
        staged = set(self._staged_epochs())
        journaled = {int(name.split("=", 1)[1]) for name in self._migrations.names() if name.startswith("epoch=")}
        epochs = sorted(staged | journaled)
        protected = {self._read_pointer(_PENDING)} if self.location.exists(_PENDING) else set()
        if self.location.exists(_CURRENT):
            pointer = self.location.read_json(_CURRENT)
            protected |= {int(pointer["epoch"]), int(pointer.get("previous", pointer["epoch"]))}
        old = [e for e in epochs[: max(0, len(epochs) - keep)] if e not in protected]
        for epoch in old:
            # The journal first: a crash in between leaves a layout nobody points at, forgotten next time.
            self._migrations.child(_journal_folder(epoch)).delete_tree()
            self.location.delete_file(_epoch_file(epoch))
        return old

    def _staged_epochs(self) -> list[int]:
        return [int(name[len("epoch=") : -len(".json")]) for name in self.location.names() if name.startswith("epoch=")]

    def clear_pending(self) -> None:
        """Reopen the barrier."""
        self.location.delete_file(_PENDING)

    def discard(self, epoch: int) -> None:
        """Forget a staged layout that was rolled back (never the committed one)."""
        if self.location.exists(_CURRENT) and self._read_pointer(_CURRENT) == epoch:
            raise RegistryError(f"layout epoch {epoch} is committed and cannot be discarded")
        self.location.delete_file(_epoch_file(epoch))

    def _point(self, name: str, epoch: int, previous: int | None = None) -> None:
        body = {"epoch": epoch} if previous is None else {"epoch": epoch, "previous": previous}
        self.location.publish_bytes(name, json.dumps(body).encode())

    def _read_pointer(self, name: str) -> int:
        return int(self.location.read_json(name)["epoch"])
