"""`MigrationReport`: what a migration cost — the figures the resizing asset puts in Dagster
metadata and the bench prints."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class MigrationReport:
    old_epoch: int
    new_epoch: int
    operation: str
    channels_before: int
    channels_after: int
    keys_moved: int = 0
    bytes_moved: int = 0
    keys_total: int | None = None
    ideal_fraction: float = 0.0
    ring_fraction: float = 0.0
    phase_ms: dict[str, float] = field(default_factory=dict)
    outcome: str = "complete"

    @property
    def fraction_moved(self) -> float | None:
        """Share of all keys that travelled (None if the total was not counted)."""
        if not self.keys_total:
            return None
        return self.keys_moved / self.keys_total

    @property
    def donate_collect_s(self) -> float:
        """The state-moving time: donate + vertical barrier + collect."""
        return sum(self.phase_ms.get(p, 0.0) for p in ("donate", "vertical_barrier", "collect")) / 1000.0

    @property
    def total_ms(self) -> float:
        return sum(self.phase_ms.values())

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["fraction_moved"] = self.fraction_moved
        out["donate_collect_s"] = self.donate_collect_s
        out["total_ms"] = self.total_ms
        return out
