"""Measurements behind `esp bench ring`: key movement vs the ideal, load balance, vectorized
lookup speed, and the cost of migrating 1e6 keys of persistent state from 4 to 5 channels.

Pure functions returning plain data; the CLI adds progress bars, the table, JSON and the plot.
`progress` callbacks receive one call per unit of work so a caller can drive a progress bar.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from elasticity.hashing import hash_int64_array
from elasticity.layout import DEFAULT_TOKENS_PER_CHANNEL, INT64_MAX, INT64_MIN, Layout
from elasticity.migration import LayoutRegistry, Migrator
from elasticity.state import Int64Codec, Location, RocksBackend
from elasticity.state.records import entries_table

Progress = Callable[[int], None]

TARGET_LOOKUPS_PER_S = 5_000_000
TARGET_MIGRATE_1E6_S = 3.0
TARGET_MAX_OVER_MEAN = 1.10
TARGET_MOVE_TOLERANCE = 0.15


def _no_progress(_: int) -> None:
    return None


def random_key_hashes(n_keys: int, seed: int = 42) -> np.ndarray:
    """Hashes of n random LongType keys, exactly as Spark's xxhash64 would compute them."""
    keys = np.random.default_rng(seed).integers(INT64_MIN, INT64_MAX, size=n_keys, dtype=np.int64, endpoint=True)
    return hash_int64_array(keys)


@dataclass(frozen=True)
class ScalePoint:
    """One step N-1 -> N of growing the ring by scale-out (N=1 has no move)."""

    n_channels: int
    moved_fraction: float
    ideal_fraction: float
    max_over_mean: float

    @property
    def moved_over_ideal(self) -> float | None:
        return self.moved_fraction / self.ideal_fraction if self.ideal_fraction else None


def measure_scaling(
    hashes: np.ndarray,
    max_channels: int = 64,
    tokens_per_channel: int = DEFAULT_TOKENS_PER_CHANNEL,
    progress: Progress = _no_progress,
) -> list[ScalePoint]:
    """Grow 1 -> max_channels one channel at a time; at each N measure the share of keys that
    moved (vs the ideal 1/N) and max/mean keys per channel."""
    points = []
    layout = Layout.uniform(1, tokens_per_channel)
    owners = layout.lookup(hashes)
    for n in range(1, max_channels + 1):
        if n > 1:
            layout = layout.scale_out(1)
            new_owners = layout.lookup(hashes)
            moved, ideal = float(np.mean(new_owners != owners)), 1.0 / n
            owners = new_owners
        else:
            moved, ideal = 0.0, 0.0
        counts = np.bincount(layout.lookup_partitions(hashes), minlength=layout.n_channels)
        points.append(ScalePoint(n, moved, ideal, float(counts.max() / counts.mean())))
        progress(1)
    return points


def measure_lookups(
    hashes: np.ndarray, layout: Layout, repeats: int = 5, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Best-of-`repeats` routed hashes per second for one vectorized call over `hashes`."""
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        layout.lookup(hashes)
        best = min(best, clock() - start)
    return len(hashes) / best


@dataclass
class MigrationBench:
    n_keys: int
    n_from: int
    n_to: int
    load_s: float
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def donate_collect_s(self) -> float:
        return float(self.report["donate_collect_s"])


def measure_migration(
    n_keys: int = 1_000_000,
    n_from: int = 4,
    n_to: int = 5,
    workdir: str | None = None,
    progress: Progress = _no_progress,
    clock: Callable[[], float] = time.perf_counter,
) -> MigrationBench:
    """Load `n_keys` int64 counts into `n_from` RocksDB channels (durable history on local
    disk), then migrate them to `n_to` channels; the report's donate_collect_s is the figure."""
    codec = Int64Codec()
    with tempfile.TemporaryDirectory(prefix="esp-bench-ring-", dir=workdir) as tmp:
        root = f"{tmp}/durable"
        backend = RocksBackend(codec, durable=root, local_dir=f"{tmp}/local")
        try:
            layout = Layout.uniform(n_from)
            start = clock()
            _load(backend, layout, n_keys, progress)
            load_s = clock() - start
            LayoutRegistry(Location.of(root)).initialize(layout)
            target = layout.scale_out(n_to - n_from) if n_to > n_from else layout.scale_in(n_from - n_to)
            report = Migrator(root, backend, clock=clock, count_keys=False).migrate(target)
            report.keys_total = n_keys
            progress(1)
            return MigrationBench(n_keys, n_from, n_to, load_s, report.to_dict())
        finally:
            backend.close()


def _load(backend: RocksBackend, layout: Layout, n_keys: int, progress: Progress) -> None:
    keys = np.arange(n_keys, dtype=np.int64)
    hashes = hash_int64_array(keys)
    owners = layout.lookup(hashes)
    values = keys.astype("<i8").tobytes()  # Int64Codec's encoding, for every key at once
    for channel in layout.channels:
        index = np.flatnonzero(owners == channel)
        table = entries_table(hashes[index], [str(i) for i in index], [values[8 * i : 8 * i + 8] for i in index])
        with backend.open(channel).begin(0) as tx:
            tx.put_entries(table)
        progress(1)


def summarize(points: list[ScalePoint], lookups_per_s: float, migration: MigrationBench) -> dict[str, Any]:
    """The headline figures (worst cases over N) plus the per-N series."""
    ratios = [p.moved_over_ideal for p in points if p.moved_over_ideal is not None]
    worst_ratio = max(ratios, key=lambda r: abs(r - 1.0)) if ratios else None
    return {
        "moved_fraction_over_ideal": worst_ratio,
        "moved_fraction_over_ideal_min": min(ratios) if ratios else None,
        "moved_fraction_over_ideal_max": max(ratios) if ratios else None,
        "max_over_mean_load": max(p.max_over_mean for p in points),
        "lookups_per_s": lookups_per_s,
        "migrate_1e6_keys_s": migration.donate_collect_s,
        "migration": {
            "n_keys": migration.n_keys,
            "n_from": migration.n_from,
            "n_to": migration.n_to,
            "load_s": migration.load_s,
            "report": migration.report,
        },
        "targets": {
            "moved_fraction_over_ideal": [1 - TARGET_MOVE_TOLERANCE, 1 + TARGET_MOVE_TOLERANCE],
            "max_over_mean_load": TARGET_MAX_OVER_MEAN,
            "lookups_per_s": TARGET_LOOKUPS_PER_S,
            "migrate_1e6_keys_s": TARGET_MIGRATE_1E6_S,
        },
        "series": [asdict(p) for p in points],
    }
