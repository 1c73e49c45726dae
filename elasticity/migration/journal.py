"""The migration journal: one small JSON file per phase reached, so a restarted process (or a
human) can tell how far a migration got. Files are published atomically and never rewritten,
which also works on object stores where appending is impossible."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from elasticity.state.files import Location


class Phase(StrEnum):
    PLANNED = "planned"
    DONATING = "donating"
    DONATED = "donated"  # the vertical barrier passed: every donation is durable and valid
    COLLECTING = "collecting"
    COLLECTED = "collected"
    COMMITTED = "committed"
    COMPLETE = "complete"
    FAILED = "failed"
    RECOVERING = "recovering"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"


TERMINAL_PHASES = frozenset({Phase.COMPLETE, Phase.ROLLED_BACK})


class Journal:
    """Ordered phase records of the migration to one layout epoch."""

    def __init__(self, location: Location, wall_clock: Callable[[], float]) -> None:
        self.location = location
        self._wall_clock = wall_clock

    def record(self, phase: Phase, **details: Any) -> None:
        sequence = len(self.location.names())
        body = {"phase": phase.value, "at": self._wall_clock(), **details}
        self.location.publish_bytes(f"{sequence:04d}-{phase.value}.json", json.dumps(body, sort_keys=True).encode())

    def entries(self) -> list[dict[str, Any]]:
        return [self.location.read_json(name) for name in self.location.names()]

    def phases(self) -> list[Phase]:
        return [Phase(name.split("-", 1)[1].removesuffix(".json")) for name in self.location.names()]

    def has(self, phase: Phase) -> bool:
        return phase in self.phases()

    def is_finished(self) -> bool:
        return any(p in TERMINAL_PHASES for p in self.phases())
