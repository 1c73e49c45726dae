"""Figures over repeated runs of a benchmark: each figure's median with its spread, in one shape
for every `esp bench ... --repetitions` command (a figure counts when it reproduces)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """Median, min and max of the values measured (None: not measured in that run), how many were,
    and every run's value in order."""
    present = [float(v) for v in values if v is not None]
    if not present:
        return {"median": None, "min": None, "max": None, "n": 0, "runs": list(values)}
    return {
        "median": float(statistics.median(present)),
        "min": min(present),
        "max": max(present),
        "n": len(present),
        "runs": list(values),
    }
