"""Figures of one policy's run in `esp bench multistage`, from measured per-second series.

Pure (numpy only), so the unit tests check them on hand-made series:

- `slo_attainment`: share of the trace's seconds whose end-to-end p99 probe latency (the last
  stage's probes: they pass every stage of the batch) is within the SLO;
- `channel_seconds`: channels in effect, summed over stages and seconds;
- `decisions`: stage rescales realized;
- `prescale_lead_s`: per rise of the load, seconds from the rise to the downstream stage's first
  scale-out after it (None: it never grew before the next change of the load);
- `congested_after_s`: per rise, seconds from the rise to the first tick the job was congested
  (None: never before the next change); `before_congestion` says whether the downstream stage
  grew before that (or without any congestion at all): the pre-scaling As-Stream is for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class StageRescaleAt:
    """A realized rescale of a stage, seconds after the trace started."""

    time_s: float
    stage: str
    from_channels: int
    to_channels: int
    rule: str


@dataclass(frozen=True)
class TickAt:
    """One tick of the loop: when (seconds after the start) and whether the job was congested."""

    time_s: float
    congested: bool


def rises(rates_rps: Sequence[float]) -> list[tuple[float, float]]:
    """(second, next change or end) of every rise of a per-second target rate."""
    rates = np.asarray(rates_rps, dtype=float)
    changes = [k for k in range(1, rates.size) if rates[k] != rates[k - 1]]
    bounds = [*changes, rates.size]
    return [(float(k), float(bounds[i + 1])) for i, k in enumerate(changes) if rates[k] > rates[k - 1]]


def first_after(times: Sequence[float], start: float, end: float) -> float | None:
    """Seconds from `start` to the first time in [start, end), None if there is none."""
    inside = [t for t in times if start <= t < end]
    return float(min(inside) - start) if inside else None


def policy_figures(
    target_rps: Sequence[float],
    channels_by_stage: dict[str, np.ndarray],
    p99_s: np.ndarray,
    slo_s: float,
    rescales: Sequence[StageRescaleAt],
    ticks: Sequence[TickAt],
    downstream: str,
) -> dict[str, Any]:
    """The figures of the module docstring for one policy's run."""
    seconds = len(target_rps)
    steps = []
    for start, end in rises(target_rps):
        grown = first_after(
            [r.time_s for r in rescales if r.stage == downstream and r.to_channels > r.from_channels], start, end
        )
        congested = first_after([t.time_s for t in ticks if t.congested], start, end)
        steps.append(
            {
                "rise_at_s": start,
                "downstream_scale_out_after_s": grown,
                "congested_after_s": congested,
                "before_congestion": bool(grown is not None and (congested is None or grown < congested)),
            }
        )
    return {
        "slo_attainment": float(np.mean(p99_s[:seconds] <= slo_s)),
        "channel_seconds": float(sum(float(np.sum(c[:seconds])) for c in channels_by_stage.values())),
        "channel_seconds_by_stage": {stage: float(np.sum(c[:seconds])) for stage, c in channels_by_stage.items()},
        "decisions": len(rescales),
        "prescale_lead_s": [s["downstream_scale_out_after_s"] for s in steps],
        "steps": steps,
        "max_p99_s": float(np.max(p99_s[:seconds])) if seconds else 0.0,
    }
