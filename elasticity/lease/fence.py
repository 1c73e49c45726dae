"""The check a writer makes right before it commits (the stage's lease still carries its token),
and the base of a held lease, which hands its writers that check.

A `Fence` is small and picklable: the driver ships it to the channel tasks on the executors,
which read the lease where it lives (the local lease file, or the lease object on the store).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from elasticity.lease.holder import FencedOut, Holder, read_local_holder
from elasticity.lease.record import read_store_record
from elasticity.state import uris


def read_holder(root: str | Path) -> Holder | None:
    """The last acquirer of the stage's lease at `root` (None if none, or unreadable)."""
    text = str(root)
    if uris.is_local(text):
        return read_local_holder(Path(uris.local_path(text)))
    record = read_store_record(text)
    return record.holder if record is not None else None


@dataclass(frozen=True)
class Fence:
    """What a writer checks before it commits: the lease still carries its token."""

    root: str
    token: int

    def check(self) -> None:
        holder = read_holder(self.root)
        if holder is None or holder.token != self.token:
            now = "nobody" if holder is None else holder.describe()
            raise FencedOut(f"lease token {self.token} of {self.root} is no longer current (held by {now})")


class Lease(ABC):
    """A held lease; `release()` (or the holder's death) frees it."""

    def __init__(self, root: str, holder: Holder) -> None:
        self.root = root
        self.holder = holder

    @property
    def fence(self) -> Fence:
        return Fence(self.root, self.holder.token)

    @abstractmethod
    def release(self) -> None:
        """Give the lease up; safe to call twice."""
