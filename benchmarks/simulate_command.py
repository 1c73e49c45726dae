"""`esp bench simulate`: the controller at scale on a simulated queueing model (BENCHMARKS.md section 6).

Runs the real elastic control loop (elasticity.control) on a trace against the fluid queueing
model, finds the best static channel count by simulating static runs of the same trace, and
writes the figures as JSON, a PNG of input rate / channels / p99 latency, and a rich table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.control_figures import initial_channels_for, run_elasticity_benchmark
from elasticity.control.levels import level_sequence
from elasticity.control.options import ControllerOptions, ControlOptions, OverloadOptions
from elasticity.control.simulation import LayoutKind, SimulationRun, StageModelOptions
from elasticity.control.traces import trace_by_name


def simulate_command(
    channels_max: int = typer.Option(1000, "--channels-max", min=1, help="Most channels the controller may use."),
    rate: float = typer.Option(1e6, "--rate", min=1.0, help="Peak input rate of the trace, records/s."),
    json_path: Path = typer.Option(..., "--json", help="Where to write the figures (JSON)."),
    png_path: Path | None = typer.Option(None, "--png", help="Where to write the plot (PNG)."),
    trace_name: str = typer.Option("esault", "--trace", help="esault | square | sine | step."),
    service_rate: float | None = typer.Option(
        None,
        "--service-rate",
        help="Records/s per channel; default: peak / (channels_max / 2), so the peak needs half.",
    ),
    slo: float = typer.Option(1.0, "--slo", min=0.001, help="Latency SLO (s) on the per-second p99 probe latency."),
    initial_channels: int | None = typer.Option(
        None, "--initial-channels", help="Channels at start; default: the level that carries the first rate."
    ),
    layout: str = typer.Option("uniform", "--layout", help="uniform | skewed (one hot channel)."),
    rescale_pause: float = typer.Option(0.5, "--rescale-pause", min=0.0, help="Processing pause per rescale (s)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the arrival noise."),
    micro_batches: bool = typer.Option(
        False,
        "--micro-batches/--independent-channels",
        help="Channels in lock-step micro-batches (every probe waits for the slowest channel, as on Spark).",
    ),
    channel_warmup: float = typer.Option(
        0.0,
        "--channel-warmup",
        min=0.0,
        help="Seconds a channel added by a rescale needs to reach the full service rate (starts at half).",
    ),
) -> None:
    """Simulate the elastic controller on a trace; write JSON (+ PNG) and print the figures."""
    if layout not in ("uniform", "skewed"):
        raise typer.BadParameter("--layout must be uniform or skewed")
    layout_kind: LayoutKind = "uniform" if layout == "uniform" else "skewed"
    console = Console()
    trace = trace_by_name(trace_name, rate)
    model_options = StageModelOptions(
        service_rate_rps=service_rate or rate / max(1.0, channels_max / 2),
        rescale_pause_s=rescale_pause,
        seed=seed,
        channel_warmup_s=channel_warmup,
        micro_batches=micro_batches,
    )
    control_options = ControlOptions(
        overload=OverloadOptions(max_latency_s=slo),
        controller=ControllerOptions(max_channels=channels_max),
    )
    start_channels = initial_channels or initial_channels_for(
        float(trace.rate_at(0.0)),
        model_options.service_rate_rps,
        control_options.controller.scale_out_utilization,
        level_sequence(1, channels_max),
    )

    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        elastic_task = progress.add_task(
            f"elastic run ({trace.name})", total=int(trace.duration_s / model_options.tick_s)
        )
        static_task = progress.add_task("static runs (binary search)", total=None)

        def on_tick(done: int, total: int) -> None:
            progress.update(elastic_task, completed=done, total=total)

        def on_static_run(channels: int) -> None:
            progress.update(static_task, advance=1, description=f"static runs (trying {channels} channels)")

        figures, run, _static = run_elasticity_benchmark(
            trace,
            model_options,
            control_options,
            start_channels,
            slo,
            layout=layout_kind,
            progress=on_tick,
            on_static_run=on_static_run,
        )
        progress.update(static_task, total=figures["summary"]["static_runs_simulated"], description="static runs")

    figures["initial_channels"] = start_channels
    figures["layout"] = layout
    figures["rescale_pause_s"] = rescale_pause
    figures["channel_warmup_s"] = channel_warmup
    figures["seed"] = seed
    figures["micro_batches"] = micro_batches
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(figures, indent=2))
    if png_path is not None:
        write_plot(run, figures, png_path)
    console.print(figures_table(figures))
    console.print(f"JSON: {json_path}" + (f"   PNG: {png_path}" if png_path else ""))


def figures_table(figures: dict[str, Any]) -> Table:
    summary = figures["summary"]
    table = Table(title=f"Elastic controller on the {figures['trace']} trace (simulated)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("peak rate (rec/s)", f"{figures['peak_rate_rps']:,.0f}"),
        ("service rate per channel (rec/s)", f"{figures['service_rate_rps']:,.0f}"),
        ("max channels", str(figures["max_channels"])),
        ("load changes", str(summary["load_changes"])),
        (
            "decisions to settle (max / mean)",
            f"{summary['max_decisions_to_settle']} / {summary['mean_decisions_to_settle']:.2f}",
        ),
        ("max overshoot (channels)", str(summary["max_overshoot_channels"])),
        ("oscillations in steady phases", str(summary["oscillations_in_steady_phases"])),
        (f"SLO attainment (p99 <= {figures['slo_s']} s)", f"{summary['slo_attainment']:.3f}"),
        ("rescale decisions", str(summary["rescale_decisions"])),
        (
            "best static channels (its SLO attainment)",
            f"{summary['best_static_channels']} ({summary['best_static_slo_attainment']:.3f})",
        ),
        ("channel-seconds elastic / best static", f"{summary['channel_seconds_ratio']:.3f}"),
        ("elastic simulation wall time (s)", f"{summary['simulation_wall_time_s']:.2f}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def write_plot(run: SimulationRun, figures: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = figures["summary"]
    fig, (ax_rate, ax_channels, ax_latency) = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
    ax_rate.plot(run.times_s, run.input_rate_rps, color="tab:blue")
    ax_rate.set_ylabel("input rate (rec/s)")
    ax_channels.step(run.times_s, run.channels, where="post", color="tab:green", label="elastic")
    ax_channels.axhline(summary["best_static_channels"], color="gray", linestyle="--", label="best static")
    for decision in run.decisions:
        ax_channels.axvline(decision.time_s, color="tab:orange", alpha=0.25, linewidth=0.8)
    ax_channels.set_ylabel("channels")
    ax_channels.legend(loc="upper right")
    ax_latency.plot(run.times_s, run.p99_latency_s, color="tab:red")
    ax_latency.axhline(figures["slo_s"], color="black", linestyle=":", label="SLO")
    ax_latency.set_yscale("log")
    ax_latency.set_ylabel("p99 probe latency (s)")
    ax_latency.set_xlabel("time (s)")
    ax_latency.legend(loc="upper right")
    fig.suptitle(
        f"{figures['trace']} trace: SLO attainment {summary['slo_attainment']:.3f}, "
        f"channel-seconds vs static {summary['channel_seconds_ratio']:.2f}"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
