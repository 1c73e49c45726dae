"""What a saved `esp bench elasticity` run says about a micro-batch's overhead at the peak:
the overhead its static segment's p99 allows, against the non-busy seconds per cycle of the
periods its controller judged (BENCHMARKS.md section 5, "A busy-time capacity netted by the
least batch overhead seen").

A static segment of `n` channels that meets the SLO at the peak bounds the overhead: a record
waits at most about two cycles (c <= p99 / 2), and its channels are busy peak / (n x busy rate)
of each cycle, so at most p99 / 2 x (1 - peak / (n x busy rate)) of a cycle is spent outside
them. Run as `python -m benchmarks.batch_overhead benchmarks/results/elasticity-*.json`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MET_SLO = 0.9
"""A static segment whose SLO attainment is below this bounds nothing (it did not keep up)."""


@dataclass(frozen=True)
class PeriodReading:
    """One judged period of a run, from its tick signals."""

    channels: int
    throughput_rps: float
    busy_share_mean: float
    batch_cycle_s: float

    @property
    def non_busy_s(self) -> float:
        """Seconds of the cycle the mean channel was not busy."""
        return self.batch_cycle_s * (1.0 - self.busy_share_mean)

    @property
    def busy_rate_rps(self) -> float:
        """Records a channel processed per second of its busy time."""
        return self.throughput_rps / (self.channels * self.busy_share_mean)


@dataclass(frozen=True)
class OverheadRow:
    """A static segment's bound on the overhead, beside the run's readings of it."""

    run: str
    static_channels: int
    p99_s: float
    busy_rate_rps: float
    allowed_overhead_s: float
    periods: int
    least_s: float
    low_decile_s: float
    median_s: float

    def markdown(self) -> str:
        return (
            f"| `{self.run}` | {self.static_channels} | {self.p99_s:.1f} | {self.busy_rate_rps:.0f} | "
            f"**{self.allowed_overhead_s:.2f}** | {self.periods} | {self.least_s:.2f} | {self.low_decile_s:.2f} | "
            f"{self.median_s:.2f} |"
        )


def readings(
    run_ticks: list[dict[str, Any]], decisions: list[dict[str, Any]], first_channels: int
) -> list[PeriodReading]:
    """The periods of one run that carry a throughput, a busy share and a cycle; a tick's channel
    count is the last decision's target once its rescale has begun settling."""
    ordered = sorted(decisions, key=lambda decision: decision["time_s"])
    channels, pending, taken, found = first_channels, None, 0, []
    for tick in run_ticks:
        while taken < len(ordered) and ordered[taken]["time_s"] <= tick["time_s"] + 1e-6:
            pending, taken = ordered[taken]["to_channels"], taken + 1
        if tick["rule"] == "settling" and pending is not None:
            channels, pending = pending, None
        signals = tick["signals"]
        if signals.get("throughput_rps") and signals.get("busy_share_mean") and "batch_cycle_s" in signals:
            found.append(
                PeriodReading(channels, signals["throughput_rps"], signals["busy_share_mean"], signals["batch_cycle_s"])
            )
    return found


def allowed_overhead_s(p99_s: float, peak_rps: float, channels: int, busy_rate_rps: float) -> float:
    """The most a cycle can spend outside `channels` busy at `busy_rate_rps` with a p99 of `p99_s`."""
    return p99_s / 2.0 * (1.0 - peak_rps / (channels * busy_rate_rps))


def overhead_rows(name: str, result: dict[str, Any]) -> list[OverheadRow]:
    """One row per static segment of the saved run `result` that met the SLO and bounds the overhead."""
    periods = [
        reading
        for ticks, decisions in zip(result.get("run_ticks", []), result.get("run_decisions", []), strict=False)
        for reading in readings(ticks, decisions, result["options"].get("initial_channels", 1))
    ]
    if not periods:
        return []
    non_busy = np.array([reading.non_busy_s for reading in periods])
    busy_rate = float(np.median([reading.busy_rate_rps for reading in periods]))
    rows = []
    for segment in result["static_segments"]:
        busy_at_peak = result["peak_rate_rps"] / (segment["channels"] * busy_rate)
        if segment["slo_attainment"] < MET_SLO or busy_at_peak >= 1.0:
            continue
        rows.append(
            OverheadRow(
                name,
                segment["channels"],
                segment["max_p99_s"],
                busy_rate,
                allowed_overhead_s(segment["max_p99_s"], result["peak_rate_rps"], segment["channels"], busy_rate),
                len(periods),
                float(non_busy.min()),
                float(np.percentile(non_busy, 10)),
                float(np.median(non_busy)),
            )
        )
    return rows


def main(paths: list[str]) -> None:
    columns = (
        "run file",
        "static channels",
        "p99 s",
        "busy rate (median)",
        "overhead the p99 allows, s",
        "periods",
        "least",
        "low decile",
        "median",
    )
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for path in sorted(paths):
        name = Path(path).stem.removeprefix("elasticity-")
        for row in overhead_rows(name, json.loads(Path(path).read_text())):
            print(row.markdown())


if __name__ == "__main__":
    main(sys.argv[1:])
