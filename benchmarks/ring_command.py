"""`esp bench ring`: how good the consistent-hash ring and the state migration are.

Measures key movement vs the ideal 1/N and max/mean load for N = 1..64 (grown by scale-out),
vectorized lookups per second, and donate+collect of 1e6 keys of RocksDB state from 4 to 5
channels; writes JSON and a PNG, and prints the figures against their targets.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.ring import (
    ScalePoint,
    measure_lookups,
    measure_migration,
    measure_scaling,
    random_key_hashes,
    summarize,
)
from elasticity.layout import Layout


def ring_command(
    json_out: Path = typer.Option(Path("out/bench/ring.json"), "--json", help="Where to write the JSON results."),
    png_out: Path | None = typer.Option(None, "--png", help="Plot path (default: next to the JSON, .png)."),
    keys: int = typer.Option(1_000_000, help="Random keys for movement, balance and lookups."),
    max_channels: int = typer.Option(64, help="Grow the ring from 1 to this many channels."),
    migrate_keys: int = typer.Option(1_000_000, help="Keys of RocksDB state to migrate from 4 to 5 channels."),
    workdir: Path | None = typer.Option(None, help="Local folder for the migration's state (default: system temp)."),
    seed: int = typer.Option(42, help="Seed of the random keys."),
) -> None:
    """Ring movement/balance over N, lookups/s, and a 1e6-key 4->5 migration (JSON + PNG)."""
    console = Console()
    hashes = random_key_hashes(keys, seed)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        scaling = progress.add_task(f"movement & balance, N=1..{max_channels}", total=max_channels)
        points = measure_scaling(hashes, max_channels, progress=lambda n: progress.advance(scaling, n))
        lookups = progress.add_task("vectorized lookups", total=1)
        layout = _grown(max_channels)
        lookups_per_s = measure_lookups(hashes, layout)
        progress.advance(lookups)
        migrating = progress.add_task(f"load + migrate {migrate_keys:,} keys 4->5", total=5)
        migration = measure_migration(
            migrate_keys, 4, 5, str(workdir) if workdir else None, progress=lambda n: progress.advance(migrating, n)
        )
    results = summarize(points, lookups_per_s, migration)
    results["environment"] = {"python": platform.python_version(), "machine": platform.machine(), "at": time.time()}
    results["settings"] = {"keys": keys, "max_channels": max_channels, "migrate_keys": migrate_keys, "seed": seed}
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(results, indent=2))
    png = png_out if png_out is not None else json_out.with_suffix(".png")
    _plot(points, png)
    console.print(_table(results))
    console.print(f"wrote {json_out} and {png}")


def _grown(n_channels: int) -> Layout:
    layout = Layout.uniform(1)
    for _ in range(n_channels - 1):
        layout = layout.scale_out(1)
    return layout


def _table(results: dict[str, Any]) -> Table:
    targets = results["targets"]
    low, high = targets["moved_fraction_over_ideal"]
    rows = [
        (
            "moved_fraction_over_ideal (worst N)",
            f"{results['moved_fraction_over_ideal']:.4f}",
            f"{low:.2f}..{high:.2f}",
            low <= results["moved_fraction_over_ideal"] <= high,
        ),
        (
            "max_over_mean_load (worst N)",
            f"{results['max_over_mean_load']:.4f}",
            f"<= {targets['max_over_mean_load']:.2f}",
            results["max_over_mean_load"] <= targets["max_over_mean_load"],
        ),
        (
            "lookups_per_s",
            f"{results['lookups_per_s']:,.0f}",
            f">= {targets['lookups_per_s']:,}",
            results["lookups_per_s"] >= targets["lookups_per_s"],
        ),
        (
            "migrate_1e6_keys_s (donate+collect)",
            f"{results['migrate_1e6_keys_s']:.3f}",
            f"<= {targets['migrate_1e6_keys_s']}",
            results["migrate_1e6_keys_s"] <= targets["migrate_1e6_keys_s"],
        ),
    ]
    table = Table(title="esp bench ring")
    for column in ("figure", "measured", "target", "ok"):
        table.add_column(column)
    for name, measured, target, ok in rows:
        table.add_row(name, measured, target, "[green]yes[/]" if ok else "[red]no[/]")
    report = results["migration"]["report"]
    table.add_row("  keys moved / bytes moved", f"{report['keys_moved']:,} / {report['bytes_moved']:,}", "", "")
    return table


def _plot(points: list[ScalePoint], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p for p in points if p.ideal_fraction]
    fig, (moved_ax, load_ax) = plt.subplots(1, 2, figsize=(10, 4))
    moved_ax.plot([p.n_channels for p in steps], [p.moved_fraction for p in steps], "o-", ms=3, label="moved")
    moved_ax.plot([p.n_channels for p in steps], [p.ideal_fraction for p in steps], "--", label="ideal 1/N")
    moved_ax.set(xlabel="channels N after scale-out", ylabel="fraction of keys moved", yscale="log", title="N-1 -> N")
    moved_ax.legend()
    load_ax.plot([p.n_channels for p in points], [p.max_over_mean for p in points], "o-", ms=3)
    load_ax.axhline(1.10, color="red", linestyle="--", label="target 1.10")
    load_ax.set(xlabel="channels N", ylabel="max / mean keys per channel", title="balance")
    load_ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
