"""`esp bench floor`: one micro-batch of a small chunk, for queries doing less and less of the
word count (the Kafka source alone, the stateless JVM part, Spark's stateful count, esp), side
by side in one run (JSON + PNG): how short a batch, and so a rescale pause, can be here."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.rescale_command import bench_broker, bench_spark
from orchestration.cli.common import ConfigOption, console, friendly_errors

ALL_SYSTEMS = "read,prepare,native,esp"
"""`benchmarks.floor.SYSTEMS` as the option's default, written out so that `--help` imports no Spark."""

SYSTEM_LABELS = {
    "read": "read: the Kafka source alone",
    "prepare": "prepare: parse + pre-aggregate (JVM)",
    "native": "native groupBy().count()",
    "esp": "esp, native's outputs",
}

BREAKDOWN = ("latestOffset", "queryPlanning", "getBatch", "addBatch", "walCommit", "commitOffsets")
"""Parts of Spark's `durationMs` of a trigger shown in the table and the plot, in trigger order."""


def floor_command(
    chunks: int = typer.Option(12, min=1, help="Chunks per system, one batch each."),
    chunk_lines: int = typer.Option(200, min=1, help="Lines of a chunk (as at esp bench rescale's rescale)."),
    partitions: int = typer.Option(4, min=1, help="Topic partitions = elastic channels = native state partitions."),
    idle: float = typer.Option(1.5, min=0.0, help="Seconds a query idles between chunks."),
    state_keys: str = typer.Option(
        "0", help="Distinct words native and esp hold before their chunks (e.g. 1e7), which the chunks then draw from."
    ),
    warm_chunks: int = typer.Option(1, min=1, help="Unmeasured chunks first (raise it with large state: 3)."),
    systems: str = typer.Option(ALL_SYSTEMS, help="Systems to run, comma-separated, in this order."),
    json_out: Path = typer.Option(Path("out/bench/floor.json"), "--json", help="Where to write the JSON results."),
    png_out: Path | None = typer.Option(None, "--png", help="Plot path (default: next to the JSON, .png)."),
    bootstrap: str | None = typer.Option(None, help="Use this broker instead of starting a private one."),
    config: ConfigOption = None,
) -> None:
    """The micro-batch floor: batch time of a small chunk for partial and full word counts."""
    from benchmarks.floor import FloorOptions, run_floor_benchmark, systems_named
    from benchmarks.rescale_command import parse_sizes
    from orchestration.stack.project import load_settings

    with friendly_errors():
        state = parse_sizes(state_keys) if state_keys.strip() not in ("", "0") else (0,)
        if len(state) != 1:
            raise ValueError(f"--state-keys takes one size, got {state_keys!r}")
        chosen = systems_named(systems)
        settings = load_settings(config)
        with (
            tempfile.TemporaryDirectory(prefix="esp-bench-floor-") as scratch,
            bench_broker(settings, bootstrap) as servers,
        ):
            options = FloorOptions(
                chunks=chunks,
                chunk_lines=chunk_lines,
                partitions=partitions,
                idle_s=idle,
                workdir=scratch,
                state_keys=state[0],
                warm_chunks=warm_chunks,
                systems=chosen,
            )
            spark = bench_spark(settings, partitions)
            with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as p:
                task = p.add_task("starting", total=None)
                results = run_floor_benchmark(spark, servers, options, lambda d: p.update(task, description=d))
    results["command"] = (
        f"esp bench floor --chunks {chunks} --chunk-lines {chunk_lines} --partitions {partitions} --idle {idle} "
        f"--state-keys {state_keys} --warm-chunks {warm_chunks} --systems {systems} --json {json_out}"
    )
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(results, indent=2, default=str))
    png = png_out if png_out is not None else json_out.with_suffix(".png")
    plot_floor(results, png)
    console.print(floor_table(results))
    console.print(f"wrote {json_out} and {png}")


def floor_table(results: dict[str, Any]) -> Table:
    state = results["options"].get("state_keys") or 0
    held = f", {state:,} keys of state" if state else ""
    table = Table(title=f"esp bench floor ({results['options']['chunk_lines']} lines a chunk{held})")
    for column in ("system", "batch s, median [min–max]", "vs native", "addBatch ms", "rest of trigger ms"):
        table.add_column(column, justify="right")
    for name, system in results["systems"].items():
        ratio = results["ratios_to_native"].get(name)
        parts = system["median_duration_ms"]
        add_batch = parts.get("addBatch", 0)
        table.add_row(
            name,
            _spread(system),
            "—" if ratio is None else f"{ratio:.2f}",
            f"{add_batch:,.0f}",
            f"{parts.get('triggerExecution', 0) - add_batch:,.0f}",
        )
    return table


def _spread(system: dict[str, Any]) -> str:
    if system["median_s"] is None:
        return "no batch"
    return f"{system['median_s']:.3f} [{system['min_s']:.3f}–{system['max_s']:.3f}]"


def plot_floor(results: dict[str, Any], path: Path) -> None:
    """Left: every batch's time per system; right: the median of Spark's trigger breakdown."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["systems"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for i, name in enumerate(names):
        times = [run["batch_s"] for run in results["systems"][name]["runs"]]
        left.scatter([i] * len(times), times, alpha=0.6)
        if results["systems"][name]["median_s"] is not None:
            left.hlines(results["systems"][name]["median_s"], i - 0.3, i + 0.3, color="black")
    left.set_xticks(range(len(names)), [SYSTEM_LABELS.get(n, n).split(":")[0] for n in names])
    left.set(ylabel="batch time, s (commit − trigger start)", title="one micro-batch of a chunk", ylim=(0, None))
    bottoms = [0.0] * len(names)
    for part in BREAKDOWN:
        values = [results["systems"][n]["median_duration_ms"].get(part, 0) / 1000 for n in names]
        right.bar(range(len(names)), values, bottom=bottoms, label=part)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    right.set_xticks(range(len(names)), [SYSTEM_LABELS.get(n, n).split(":")[0] for n in names])
    right.set(ylabel="s (median)", title="Spark's trigger breakdown (durationMs)")
    right.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
