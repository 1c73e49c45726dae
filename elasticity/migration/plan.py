"""What a migration must move: the `diff` of two layouts grouped by donor and receiver.

Derived purely from the old and new layouts, so any process can recompute it after a crash.
`unexpected_moves` is the monotonicity check of Gedik et al.: no hash range may move between
two channels that exist in both layouts (every esp layout operation satisfies it; a split's
source survives but gives only to the new channel, a merge's source disappears).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elasticity.layout import HashRange, Layout, diff, ideal_moved_fraction, moved_space_fraction


@dataclass(frozen=True)
class MigrationPlan:
    old: Layout
    new: Layout
    ranges: tuple[HashRange, ...] = field(default=())

    @classmethod
    def between(cls, old: Layout, new: Layout) -> MigrationPlan:
        return cls(old, new, tuple(diff(old, new)))

    @property
    def epoch(self) -> int:
        return self.new.epoch

    @property
    def donors(self) -> list[int]:
        """Old channels that give something away."""
        return sorted({r.source for r in self.ranges})

    @property
    def receivers(self) -> list[int]:
        return sorted({r.target for r in self.ranges})

    @property
    def removed(self) -> list[int]:
        return sorted(set(self.old.channels) - set(self.new.channels))

    @property
    def added(self) -> list[int]:
        return sorted(set(self.new.channels) - set(self.old.channels))

    @property
    def collectors(self) -> list[int]:
        """New-layout channels whose state changes: they ingest, delete what they gave, or both."""
        surviving = set(self.new.channels)
        return sorted((set(self.receivers) | set(self.donors)) & surviving)

    def outgoing(self, source: int) -> dict[int, list[tuple[int, int]]]:
        """target -> inclusive hash ranges that `source` gives to it."""
        by_target: dict[int, list[tuple[int, int]]] = {}
        for r in self.ranges:
            if r.source == source:
                by_target.setdefault(r.target, []).append((r.start, r.end))
        return by_target

    def sources_for(self, target: int) -> list[int]:
        return sorted({r.source for r in self.ranges if r.target == target})

    def targets_of(self, source: int) -> list[int]:
        return sorted({r.target for r in self.ranges if r.source == source})

    def unexpected_moves(self) -> list[HashRange]:
        """Ranges moving between two channels present in both layouts (monotonicity violations)."""
        kept = set(self.old.channels) & set(self.new.channels)
        return [r for r in self.ranges if r.source in kept and r.target in kept]

    @property
    def ring_fraction(self) -> float:
        return moved_space_fraction(self.ranges)

    @property
    def ideal_fraction(self) -> float:
        return ideal_moved_fraction(self.old, self.new)
