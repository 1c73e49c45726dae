"""`esp bench throughput`: elastic word count vs Spark's native stateful word count on the same
pre-loaded topic, same partitions, same Spark session, several repetitions (JSON + PNG)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.rescale_command import bench_broker, bench_spark
from orchestration.cli.common import ConfigOption, console, friendly_errors

RATIO_TARGET = 0.8


def throughput_command(
    records: int = typer.Option(2_000_000, min=1, help="Lines pre-loaded into the topic."),
    partitions: int = typer.Option(4, min=1, help="Topic partitions = elastic channels = native state partitions."),
    repetitions: int = typer.Option(3, min=1, help="Runs of each system over the whole topic."),
    max_offsets: int = typer.Option(500_000, min=1, help="Records per micro-batch at most (both systems)."),
    json_out: Path = typer.Option(Path("out/bench/throughput.json"), "--json", help="Where to write the JSON results."),
    png_out: Path | None = typer.Option(None, "--png", help="Plot path (default: next to the JSON, .png)."),
    bootstrap: str | None = typer.Option(None, help="Use this broker instead of starting a private one."),
    topic: str | None = typer.Option(
        None, help="Reuse this pre-loaded topic (it must hold --records lines of the default load)."
    ),
    check: bool = typer.Option(True, help="Check each system's first run against the batch oracle."),
    full: bool = typer.Option(
        True, help="Also run esp-full: the elastic job with its bronze archive and results topic."
    ),
    profile: bool = typer.Option(
        False, help="Also run `read` (the source alone) and `prepare` (the JVM part of the word count): esp's bound."
    ),
    warmup: int = typer.Option(100_000, min=0, help="Lines of the unmeasured warm-up run of each system (0: none)."),
    workdir: Path | None = typer.Option(None, help="Folder for checkpoints and state (default: a temporary one)."),
    config: ConfigOption = None,
) -> None:
    """Elastic vs native word-count records/s on one pre-loaded topic (JSON + PNG)."""
    from benchmarks.throughput import ThroughputOptions, preload_topic, run_throughput_benchmark, step_count
    from orchestration.stack.project import load_settings

    with friendly_errors():
        settings = load_settings(config)
        with (
            tempfile.TemporaryDirectory(prefix="esp-bench-tp-") as scratch,
            bench_broker(settings, bootstrap) as servers,
        ):
            options = ThroughputOptions(
                records=records,
                partitions=partitions,
                repetitions=repetitions,
                max_offsets_per_trigger=max_offsets,
                check=check,
                workdir=str(workdir or scratch),
                full_pipeline=full,
                profile=profile,
                warmup_records=warmup,
            )
            with _progress() as progress:
                if topic is None:
                    loading = progress.add_task(f"pre-loading {records:,} lines", total=records)
                    topic = preload_topic(
                        servers, options, lambda sent, total: progress.update(loading, completed=sent)
                    )
                warmup_topic = None
                if options.warmup_records:
                    warming = progress.add_task(f"pre-loading {warmup:,} warm-up lines", total=warmup)
                    warmup_topic = preload_topic(
                        servers,
                        options,
                        lambda sent, total: progress.update(warming, completed=sent),
                        records=warmup,
                        prefix="bench-throughput-warmup",
                    )
                spark = bench_spark(settings, partitions)
                runs = progress.add_task("runs", total=step_count(options))
                results = run_throughput_benchmark(
                    spark,
                    servers,
                    options,
                    topic,
                    lambda d: progress.update(runs, advance=1, description=d),
                    warmup_topic,
                )
    results["target_ratio"] = RATIO_TARGET
    results["command"] = (
        f"esp bench throughput --records {records} --partitions {partitions} --repetitions {repetitions}"
        f"{'' if full else ' --no-full'}{' --profile' if profile else ''} --warmup {warmup} --json {json_out}"
    )
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(results, indent=2, default=str))
    png = png_out if png_out is not None else json_out.with_suffix(".png")
    plot_throughput(results, png)
    console.print(throughput_table(results))
    console.print(f"wrote {json_out} and {png}")
    if not results["correct"]:
        console.print("[bold red]a system's results differ from the batch oracle[/]")
        raise typer.Exit(code=1)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def throughput_table(results: dict[str, Any]) -> Table:
    table = Table(
        title=f"esp bench throughput ({results['options']['records']:,} records, "
        f"{results['options']['partitions']} partitions)"
    )
    for column in ("figure", "records/s", "vs native"):
        table.add_column(column, justify="right")
    ratio_ok = results["ratio"] >= RATIO_TARGET
    table.add_row(
        "esp (wall, median)",
        f"{results['elastic_records_per_s']:,.0f}",
        f"[{'green' if ratio_ok else 'red'}]{results['ratio']:.2f}[/] (target ≥ {RATIO_TARGET})",
    )
    table.add_row("native (wall, median)", f"{results['native_records_per_s']:,.0f}", "1.00")
    if "full_ratio" in results:
        table.add_row(
            "esp-full: + archive + results topic",
            f"{results['elastic_full_records_per_s']:,.0f}",
            f"{results['full_ratio']:.2f}",
        )
    for partial in ("read", "prepare"):
        if f"{partial}_ratio" in results:
            table.add_row(
                SYSTEM_LABELS[partial],
                f"{results[f'{partial}_records_per_s']:,.0f}",
                f"{results[f'{partial}_ratio']:.2f}",
            )
    busy = results.get("busy_ratio")
    table.add_row(
        "esp (busy, median)", f"{results['elastic_busy_records_per_s']:,.0f}", "—" if busy is None else f"{busy:.2f}"
    )
    table.add_row("native (busy, median)", f"{results['native_busy_records_per_s']:,.0f}", "")
    for run in results["runs"]:
        table.add_row(
            f"  run {run['repetition'] + 1} {run['system']}",
            f"{run['records_per_s']:,.0f}",
            f"{run['batches']} batches",
        )
    return table


SYSTEM_LABELS = {
    "esp": "esp, native's outputs",
    "native": "native groupBy().count()",
    "esp-full": "esp + archive + results topic",
    "read": "read: the Kafka source alone",
    "prepare": "prepare: parse + pre-aggregate (JVM)",
}


def plot_throughput(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [s for s in SYSTEM_LABELS if any(r["system"] == s for r in results["runs"])]
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, system in enumerate(systems):
        runs = [r for r in results["runs"] if r["system"] == system]
        offset = (i - (len(systems) - 1) / 2) * width
        ax.bar(
            [r["repetition"] + 1 + offset for r in runs],
            [r["records_per_s"] for r in runs],
            width=width,
            label=SYSTEM_LABELS[system],
        )
    ax.set(
        xlabel="repetition",
        ylabel="records/s (wall clock)",
        title=f"throughput: esp/native = {results['ratio']:.2f} (target ≥ {RATIO_TARGET})",
    )
    ax.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
