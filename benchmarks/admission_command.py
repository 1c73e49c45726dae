"""`esp bench admission`: the same step from 0.5× to 5× of the stage's capacity, with and without
admission control, on the real stack, repeated `--repetitions` times (JSON + PNG): the table shows
each figure's median over the rounds with its [min–max]; the PNG plots one round, the median one
by the longest batch with admission."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.rescale_command import bench_broker, bench_spark
from orchestration.cli.common import ConfigOption, console, friendly_errors

BATCH_BOUND = 1.2
"""The target: with admission, batches stay within this × the high watermark after the first cap."""


def admission_command(
    high_watermark: float = typer.Option(3.0, min=0.1, help="Admission's high watermark, seconds of batch."),
    low_watermark: float = typer.Option(1.0, min=0.05, help="Admission's low watermark, seconds of batch."),
    steady: float = typer.Option(20.0, min=1.0, help="Seconds at 0.5× capacity before the step."),
    overload: float = typer.Option(30.0, min=1.0, help="Seconds at 5× capacity."),
    rescale_after: float = typer.Option(
        15.0, min=0.0, help="Seconds into the overload at which the first rescale is asked."
    ),
    rescale_every: float = typer.Option(
        10.0,
        min=0.0,
        help="Seconds between later rescales while the overload lasts, alternately one channel more and back; "
        "one falling due while the previous is unanswered is skipped (0: one rescale per run).",
    ),
    repetitions: int = typer.Option(
        1, min=1, help="Rounds of both modes, each on fresh topics (calibrated once); the table shows medians."
    ),
    service_ms: float = typer.Option(1.0, min=0.01, help="Service time per record in the stage (sets its capacity)."),
    json_out: Path = typer.Option(Path("out/bench/admission.json"), "--json", help="Where to write the JSON results."),
    png_out: Path | None = typer.Option(None, "--png", help="Plot path (default: next to the JSON, .png)."),
    bootstrap: str | None = typer.Option(None, help="Use this broker instead of starting a private one."),
    config: ConfigOption = None,
) -> None:
    """Batch durations and rescale waits under a 10× load step, with and without admission control
    (medians over --repetitions rounds)."""
    from benchmarks.admission import AdmissionBenchOptions, run_admission_benchmark
    from orchestration.stack.project import load_settings

    with friendly_errors():
        settings = load_settings(config)
        wanted = AdmissionBenchOptions(
            high_watermark_s=high_watermark,
            low_watermark_s=low_watermark,
            steady_s=steady,
            overload_s=overload,
            rescale_after_s=rescale_after,
            rescale_every_s=rescale_every or None,
            repetitions=repetitions,
            service_ms=service_ms,
        )
        wanted.admission()  # the watermarks and the rescale schedule are validated before anything starts
        wanted.rescale_times()
        with (
            tempfile.TemporaryDirectory(prefix="esp-bench-admission-") as scratch,
            bench_broker(settings, bootstrap) as servers,
        ):
            options = replace(wanted, workdir=scratch)
            # One slot per channel at the most (a rescale adds one): the stage waits on I/O, and a
            # channel without a slot would wait for another's task and lengthen the batch.
            spark = bench_spark(settings, options.topic_partitions, slots=max(2, options.channels + 1))
            with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as p:
                task = p.add_task("calibrating the stage's capacity", total=None)
                results = run_admission_benchmark(spark, servers, options, lambda d: p.update(task, description=d))
    results["command"] = (
        f"esp bench admission --high-watermark {high_watermark} --low-watermark {low_watermark} --steady {steady} "
        f"--overload {overload} --rescale-after {rescale_after} --rescale-every {rescale_every} "
        f"--repetitions {repetitions} --service-ms {service_ms} --json {json_out}"
    )
    results["batch_bound_s"] = BATCH_BOUND * high_watermark
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(results, indent=2, default=str))
    png = png_out if png_out is not None else json_out.with_suffix(".png")
    plot_admission(results, png)
    console.print(admission_table(results))
    console.print(f"wrote {json_out} and {png}")
    if not results["correct"]:
        console.print("[bold red]a mode's results differ from the batch oracle[/]")
        raise typer.Exit(code=1)


def admission_table(results: dict[str, Any]) -> Table:
    rounds = results["repetitions"]
    table = Table(
        title=f"esp bench admission (capacity {results['capacity_lines_per_s']:,.0f} lines/s; "
        f"{rounds} round{'s' if rounds != 1 else ''}: median \\[min–max])"
    )
    columns = ("mode", "max batch s", "expected wait s", "rescale wait s", "cap changes steady", "restarts", "correct")
    for column in columns:
        table.add_column(column, justify="right")
    bound = results["batch_bound_s"]
    for mode, figures in results["median"].items():
        longest = figures["max_batch_s"]
        colour = "green" if longest["median"] is not None and longest["median"] <= bound else "red"
        table.add_row(
            mode,
            f"{_spread(longest, colour)} (≤ {bound:.1f})",
            _spread(figures["expected_rescale_wait_s"]),
            _spread(figures["rescale_wait_s"]),
            _spread(figures["cap_changes_steady"], digits=0),
            _spread(figures["query_restarts"], digits=0),
            f"{figures['correct_rounds']}/{figures['rounds']}",
        )
    return table


def _spread(figure: dict[str, Any], colour: str | None = None, digits: int = 1) -> str:
    """`median [min–max]` (the median alone when every round agrees), or — when never measured."""
    if figure["median"] is None:
        return "—"
    median = f"{figure['median']:.{digits}f}"
    if colour is not None:
        median = f"[{colour}]{median}[/]"
    if figure["min"] == figure["max"]:
        return median
    return f"{median} \\[{figure['min']:.{digits}f}–{figure['max']:.{digits}f}]"  # \\[: not rich markup


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def plot_admission(results: dict[str, Any], path: Path) -> None:
    """One round's batches per mode: the round `plotted_round` (the median one by the longest
    batch with admission)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plotted = next(r for r in results["rounds"] if r["round"] == results["plotted_round"])
    modes = list(plotted["modes"])
    fig, axes = plt.subplots(len(modes), 1, figsize=(9, 3.2 * len(modes)), sharex=True, squeeze=False)
    options = results["options"]
    for ax, mode in zip(axes[:, 0], modes, strict=True):
        batches = plotted["batches"][mode]
        ax.bar(
            [b["start_s"] for b in batches],
            [b["duration_s"] for b in batches],
            width=[max(0.2, b["duration_s"]) for b in batches],
            align="edge",
            alpha=0.6,
            label="batch duration",
        )
        ax.axhline(options["high_watermark_s"], color="red", linestyle="--", linewidth=1, label="high watermark")
        ax.axhline(options["low_watermark_s"], color="green", linestyle=":", linewidth=1, label="low watermark")
        events = plotted["events"][mode]
        ax.axvline(events["step_at_s"], color="black", linewidth=1, label="load 0.5× → 5×")
        for i, at in enumerate(events["rescales_at_s"]):
            ax.axvline(at, color="purple", linestyle="-.", linewidth=1, label="rescale asked" if i == 0 else None)
        for i, at in enumerate(events["rescales_skipped_at_s"]):
            label = "rescale skipped (previous unanswered)" if i == 0 else None
            ax.axvline(at, color="purple", linestyle=":", alpha=0.5, linewidth=1, label=label)
        ax.axvline(events["load_end_s"], color="grey", linewidth=1, label="load stops")
        ax.set_ylabel("batch s")
        summary = plotted["modes"][mode]
        waits = ", ".join(_seconds(w) for w in summary["rescale_waits_s"]) or "none asked"
        ax.set_title(
            f"{mode}: longest batch {_seconds(summary['max_batch_s'])} s, rescales waited {waits} s",
            fontsize="medium",
        )
        if any(b["admitted"] is not None for b in batches):  # recorded only where admission runs
            admitted = ax.twinx()
            admitted.step(
                [b["start_s"] for b in batches], [b["admitted"] or 0 for b in batches], where="post", color="orange"
            )
            admitted.set_ylabel("records admitted", color="orange")
    axes[0, 0].legend(fontsize="x-small", loc="upper left")
    axes[-1, 0].set_xlabel("seconds since the stream started")
    if results["repetitions"] > 1:
        fig.suptitle(
            f"round {results['plotted_round']} of {results['repetitions']} (the median by the longest batch "
            "with admission)",
            fontsize="medium",
        )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
