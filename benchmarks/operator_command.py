"""`esp bench operator`: a user-defined stateful operator (top-k pages per user) on esp vs the same
logic on Spark's applyInPandasWithState (and transformWithStateInPandas), on one pre-loaded topic,
same partitions, same Spark session, several repetitions (JSON + PNG)."""

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


def operator_command(
    records: int = typer.Option(1_000_000, min=1, help="Page views pre-loaded into the topic."),
    users: int = typer.Option(20_000, min=1, help="Distinct users (the operator's keys)."),
    pages: int = typer.Option(1_000, min=1, help="Distinct pages."),
    zipf: float = typer.Option(1.0, min=0.0, help="Skew of users and pages: weight of the i-th is 1/i^s (0: uniform)."),
    seed: int = typer.Option(7, help="Seed of the load."),
    partitions: int = typer.Option(4, min=1, help="Topic partitions = esp channels = Spark state partitions."),
    repetitions: int = typer.Option(3, min=1, help="Measured runs of each system over the whole topic."),
    max_offsets: int = typer.Option(200_000, min=1, help="Records per micro-batch at most (every system)."),
    transform_with_state: bool = typer.Option(
        True, help="Also run transformWithStateInPandas (left out, with its error, if it fails)."
    ),
    json_out: Path = typer.Option(Path("out/bench/operator.json"), "--json", help="Where to write the JSON results."),
    png_out: Path | None = typer.Option(None, "--png", help="Plot path (default: next to the JSON, .png)."),
    bootstrap: str | None = typer.Option(None, help="Use this broker instead of starting a private one."),
    check: bool = typer.Option(True, help="Check each system's first run against the plain-Python oracle."),
    warmup: int = typer.Option(50_000, min=0, help="Views of the unmeasured warm-up run of each system (0: none)."),
    workdir: Path | None = typer.Option(None, help="Folder for checkpoints and state (default: a temporary one)."),
    config: ConfigOption = None,
) -> None:
    """User-defined operator records/s: esp vs applyInPandasWithState (vs transformWithStateInPandas)."""
    from benchmarks.operator_bench import OperatorOptions, preload_views, run_operator_benchmark, step_count
    from orchestration.stack.project import load_settings

    with friendly_errors():
        settings = load_settings(config)
        with (
            tempfile.TemporaryDirectory(prefix="esp-bench-op-") as scratch,
            bench_broker(settings, bootstrap) as servers,
        ):
            options = OperatorOptions(
                records=records,
                users=users,
                pages=pages,
                zipf_s=zipf,
                seed=seed,
                partitions=partitions,
                repetitions=repetitions,
                max_offsets_per_trigger=max_offsets,
                transform_with_state=transform_with_state,
                check=check,
                warmup_records=warmup,
                workdir=str(workdir or scratch),
            )
            with _progress() as progress:
                loading = progress.add_task(f"pre-loading {records:,} views", total=records)
                load = preload_views(servers, options, on_progress=lambda n: progress.advance(loading, n))
                warmup_load = None
                if warmup:
                    warming = progress.add_task(f"pre-loading {warmup:,} warm-up views", total=warmup)
                    warmup_load = preload_views(
                        servers,
                        options,
                        records=warmup,
                        prefix="bench-operator-warmup",
                        on_progress=lambda n: progress.advance(warming, n),
                    )
                spark = bench_spark(settings, partitions)
                runs = progress.add_task("runs", total=step_count(options))
                results = run_operator_benchmark(
                    spark,
                    servers,
                    options,
                    load,
                    lambda d: progress.update(runs, advance=1, description=d),
                    warmup_load,
                )
    results["command"] = (
        f"esp bench operator --records {records} --users {users} --pages {pages} --zipf {zipf} --seed {seed} "
        f"--partitions {partitions} --repetitions {repetitions} --max-offsets {max_offsets}"
        f"{'' if transform_with_state else ' --no-transform-with-state'} --warmup {warmup} --json {json_out}"
    )
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(results, indent=2, default=str))
    png = png_out if png_out is not None else json_out.with_suffix(".png")
    plot_operator(results, png)
    console.print(operator_table(results))
    for system, error in results["unavailable"].items():
        console.print(f"[yellow]{system} did not run: {error.splitlines()[0]}[/]")
    console.print(f"wrote {json_out} and {png}")
    if not results["correct"]:
        console.print("[bold red]a system's final top pages differ from the oracle[/]")
        raise typer.Exit(code=1)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def operator_table(results: dict[str, Any]) -> Table:
    """Medians (min–max) per system, the ratios, and every run."""
    options = results["options"]
    table = Table(
        title=f"esp bench operator (top-{results['k']} pages per user; {options['records']:,} views, "
        f"{options['users']:,} users, {options['partitions']} partitions)"
    )
    for column in ("system", "wall records/s (median, min–max)", "busy records/s (median)", "checked"):
        table.add_column(column, justify="right")
    checks = {r["system"]: r["correctness"]["ok"] for r in results["runs"] if "correctness" in r}
    for system in results["systems"]:
        wall, busy = results["medians"][system]["wall"], results["medians"][system]["busy"]
        ok = checks.get(system)
        table.add_row(
            system,
            f"{_rate(wall['median'])} ({_rate(wall['min'])}–{_rate(wall['max'])})",
            _rate(busy["median"]),
            "—" if ok is None else ("[green]ok[/]" if ok else "[red]WRONG[/]"),
        )
    for pair, ratio in results["ratios"].items():
        wall, busy = ratio["wall"], ratio["busy"]
        table.add_row(
            f"ratio {pair}", "—" if wall is None else f"{wall:.2f}", "—" if busy is None else f"{busy:.2f}", ""
        )
    for run in results["runs"]:
        table.add_row(
            f"  run {run['repetition'] + 1} {run['system']}",
            _rate(run["records_per_s"]),
            _rate(run["busy_records_per_s"]),
            f"{run['batches']} batches",
        )
    return table


def plot_operator(results: dict[str, Any], path: Path) -> None:
    """Bars of each system's median records/s (wall and busy) with min–max whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = results["systems"]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    width = 0.38
    for i, (figure, label) in enumerate((("wall", "wall clock"), ("busy", "busy (Σ trigger time)"))):
        xs, heights, low, high = [], [], [], []
        for x, system in enumerate(systems):
            s = results["medians"][system][figure]
            if s["median"] is None:
                continue
            xs.append(x + (i - 0.5) * width)
            heights.append(s["median"])
            low.append(s["median"] - s["min"])
            high.append(s["max"] - s["median"])
        ax.bar(xs, heights, width=width, yerr=[low, high], capsize=4, label=label)
    ax.set_xticks(range(len(systems)), systems, fontsize="small")
    ratio = results["ratios"].get("esp/applyInPandasWithState", {}).get("wall")
    title = "top-k pages per user: median records/s (min–max)"
    if ratio is not None:
        title += f"\nesp / applyInPandasWithState = {ratio:.2f} (wall)"
    ax.set(ylabel="records/s", title=title)
    for system, error in results["unavailable"].items():
        ax.annotate(
            f"{system} did not run: {error.splitlines()[0][:70]}",
            (0.01, 0.01),
            xycoords="figure fraction",
            fontsize="x-small",
            color="firebrick",
        )
    ax.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
