"""`esp bench checkpoint`: a short fixed snapshot period, a long one and the adaptive policy
(seed 003) under the same eSault load, each stream SIGKILLed at regular intervals; recovery and
latency cost in one run on the real stack (JSON + PNG)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.rescale_command import bench_broker, bench_spark
from benchmarks.stream_process import stream_settings_file
from orchestration.cli.common import ConfigOption, console, friendly_errors


def checkpoint_command(
    max_recovery: float = typer.Option(0.45, min=0.05, help="The adaptive policy's recovery bound, seconds."),
    short_period: float = typer.Option(9.0, min=0.5, help="The short fixed period, seconds (the paper's 9 s)."),
    long_period: float = typer.Option(14.0, min=0.5, help="The long fixed period, seconds (the paper's 14 s)."),
    peak_rate: float = typer.Option(2000.0, min=10.0, help="Peak of the eSault trace, lines/s."),
    words_per_line: int = typer.Option(8, min=1, help="Words (keys) per line."),
    vocabulary: int = typer.Option(
        20_000, min=1, help="Distinct words: a small state that every batch mostly rewrites, so folding dominates."
    ),
    channels: int = typer.Option(1, min=1, help="Channels of the stage."),
    duration: float = typer.Option(190.0, min=30.0, help="Seconds of the trace played per policy."),
    kill_every: float = typer.Option(45.0, min=10.0, help="Seconds between SIGKILLs."),
    first_kill: float = typer.Option(55.0, min=5.0, help="When the first SIGKILL lands, seconds into the trace."),
    kill_jitter: float = typer.Option(
        10.0, min=0.0, help="Each kill drawn within this many seconds of its regular time (0: regular)."
    ),
    seed: int = typer.Option(
        0, help="Seed of the kill times' draws (new draws each round, the same for every policy)."
    ),
    max_offsets: int = typer.Option(6_000, min=100, help="Cap on lines per batch."),
    only: str = typer.Option("short,long,adaptive", help="Policies to run, comma-separated (to calibrate)."),
    repetitions: int = typer.Option(1, min=1, help="Rounds of every policy; figures are medians over them."),
    json_out: Path = typer.Option(Path("out/bench/checkpoint.json"), "--json", help="Where to write the JSON."),
    png_out: Path | None = typer.Option(None, "--png", help="Plot path (default: next to the JSON, .png)."),
    bootstrap: str | None = typer.Option(None, help="Use this broker instead of starting a private one."),
    config: ConfigOption = None,
) -> None:
    """Recovery after SIGKILLs and the latency cost of three snapshot policies under the eSault trace."""
    from benchmarks.checkpoint import CheckpointBenchOptions, run_checkpoint_benchmark, write_json
    from orchestration.stack.project import load_settings

    with friendly_errors():
        settings = load_settings(config)
        options = CheckpointBenchOptions(
            peak_rate=peak_rate,
            words_per_line=words_per_line,
            vocabulary=vocabulary,
            channels=channels,
            duration_s=duration,
            max_offsets=max_offsets,
            max_recovery_s=max_recovery,
            short_period_s=short_period,
            long_period_s=long_period,
            kill_every_s=kill_every,
            first_kill_s=first_kill,
            kill_jitter_s=kill_jitter,
            seed=seed,
            only=_policy_names(only),
            repetitions=repetitions,
        )
        with (
            tempfile.TemporaryDirectory(prefix="esp-bench-checkpoint-") as scratch,
            bench_broker(settings, bootstrap) as servers,
        ):
            folder = Path(scratch)
            stream_config = stream_settings_file(settings, folder, options.channels, servers)
            spark = bench_spark(settings, 4)
            with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as p:
                task = p.add_task("starting", total=None)
                results = run_checkpoint_benchmark(
                    spark, servers, stream_config, folder, options, lambda d: p.update(task, description=d)
                )
    results["command"] = (
        f"esp bench checkpoint --max-recovery {max_recovery} --short-period {short_period} --long-period "
        f"{long_period} --peak-rate {peak_rate} --words-per-line {words_per_line} --vocabulary {vocabulary} "
        f"--channels {channels} "
        f"--duration {duration} --kill-every {kill_every} --first-kill {first_kill} --kill-jitter {kill_jitter} "
        f"--seed {seed} --max-offsets {max_offsets} "
        f"--only {only} --repetitions {repetitions} --json {json_out}"
    )
    write_json(results, json_out)
    png = png_out if png_out is not None else json_out.with_suffix(".png")
    plot_checkpoint(results, png)
    console.print(checkpoint_table(results))
    console.print(f"wrote {json_out} and {png}")
    if not results["correct"]:
        console.print("[bold red]a policy's results differ from the batch oracle[/]")
        raise typer.Exit(code=1)


def _policy_names(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in ("short", "long", "adaptive")]
    if not names or unknown:
        raise typer.BadParameter(f"choose among short, long, adaptive (got {text!r})", param_hint="--only")
    return names


def checkpoint_table(results: dict[str, Any]) -> Table:
    bound = results["options"]["max_recovery_s"]
    rounds = len(results.get("rounds", [])) or 1
    title = f"esp bench checkpoint (recovery bound {bound:g} s" + (
        f", medians of {rounds} rounds [min–max])" if rounds > 1 else ")"
    )
    table = Table(title=title)
    columns = (
        "policy",
        "worst recovery s",
        "over bound",
        "restarts s",
        "peak p99 ms",
        "snapshots (in peak)",
        "write s in peak",
        "correct",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for name, summary in results["policies"].items():
        worst = summary["max_recovery_s_measured"]
        colour = "green" if worst is not None and worst <= bound else "red"
        restarts = [r["restart_s"] for r in summary["recoveries"] if r["restart_s"] is not None]
        spread = summary.get("spread", {})
        table.add_row(
            name,
            f"[{colour}]{_figure(worst, spread.get('max_recovery_s_measured'), '.2f')}[/]",
            f"{summary.get('over_bound_total', summary['over_bound'])}/{len(summary['recoveries'])}",
            f"{min(restarts):.0f}–{max(restarts):.0f}" if restarts else "—",
            _figure(summary["peak_p99_ms"], spread.get("peak_p99_ms"), ".0f"),
            f"{_figure(summary['snapshots'], spread.get('snapshots'), '.0f')} "
            f"({_figure(summary['snapshots_in_peak'], spread.get('snapshots_in_peak'), '.0f')})",
            _figure(summary.get("snapshot_write_s_in_peak"), spread.get("snapshot_write_s_in_peak"), ".2f"),
            str(summary["correct"]),
        )
    return table


def _figure(value: float | None, spread: dict[str, Any] | None, fmt: str) -> str:
    """A median with its [min–max] when there were several rounds."""
    if value is None:
        return "—"
    text = format(value, fmt)
    if spread and len(spread.get("runs", [])) > 1 and spread["min"] is not None:
        text += f" [{format(spread['min'], fmt)}–{format(spread['max'], fmt)}]"
    return text


def plot_checkpoint(results: dict[str, Any], path: Path) -> None:
    """Seed 003's figures 6-8 in one PNG: the interval between snapshots over time, the predicted
    and measured recovery over time, and the latency cost, one row per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["policies"])
    bound = results["options"]["max_recovery_s"]
    fig, axes = plt.subplots(len(names), 3, figsize=(15, 3.3 * len(names)), sharex=True, squeeze=False)
    for row, name in enumerate(names):
        series = results["series"][name]
        lo, hi = series["peak_window_s"]
        _intervals(axes[row, 0], series, name)
        _recovery(axes[row, 1], series, results["policies"][name], bound)
        _latency(axes[row, 2], series, results["policies"][name])
        for ax in axes[row]:
            ax.axvspan(lo, hi, color="orange", alpha=0.08)
            for kill in series["kills"]:
                ax.axvline(kill["at_s"], color="red", linewidth=0.8, linestyle=":")
    for ax in axes[-1]:
        ax.set_xlabel("seconds into the trace (shaded: peak; dotted: SIGKILL)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _intervals(ax, series: dict[str, Any], name: str) -> None:
    """Fig. 6: seconds between a channel's consecutive snapshots, with the input rate behind."""
    by_channel: dict[int, list[float]] = {}
    for snapshot in series["snapshots"]:
        by_channel.setdefault(snapshot["channel"], []).append(snapshot["at_s"])
    for channel, times in sorted(by_channel.items()):
        ax.plot(times[1:], [b - a for a, b in zip(times, times[1:])], marker="o", markersize=3, label=f"ch {channel}")
    ax.set_ylabel("s between snapshots")
    ax.set_title(f"{name}: snapshot intervals", fontsize="medium")
    rate = ax.twinx()
    rate.plot(range(len(series["sent_per_second"])), series["sent_per_second"], color="grey", alpha=0.4)
    rate.set_ylabel("lines/s sent", color="grey")
    ax.legend(fontsize="x-small", loc="upper left")


def _recovery(ax, series: dict[str, Any], summary: dict[str, Any], bound: float) -> None:
    """Fig. 7: the recovery the policy predicts after each batch, and each measured recovery."""
    points = [(b["end_s"], b["predicted_recovery_s"]) for b in series["batches"] if b["predicted_recovery_s"]]
    if points:
        ax.plot(*zip(*points), linewidth=0.8, label="predicted (max channel)")
    measured = [(r["kill_at_s"], r["recovery_s"]) for r in summary["recoveries"] if r["recovery_s"] is not None]
    if measured:
        ax.scatter(*zip(*measured), color="red", zorder=3, label="measured after SIGKILL")
    ax.axhline(bound, color="black", linestyle="--", linewidth=1, label="bound")
    ax.set_ylabel("recovery s")
    worst = summary["max_recovery_s_measured"]
    ax.set_title(f"recovery (worst measured {worst:.2f} s)" if worst else "recovery", fontsize="medium")
    ax.legend(fontsize="x-small", loc="upper left")


def _latency(ax, series: dict[str, Any], summary: dict[str, Any]) -> None:
    """Fig. 8: the latency cost, p99 probe latency per second."""
    measured = [(second, value) for second, value in enumerate(series["p99_per_second_ms"]) if value > 0]
    if measured:
        ax.plot(*zip(*measured), linewidth=0.8, marker=".", markersize=2)
    ax.set_yscale("log")
    ax.set_ylabel("p99 probe latency ms")
    peak = summary["peak_p99_ms"]
    ax.set_title(f"latency (peak p99 {peak:.0f} ms, undisturbed)" if peak else "latency", fontsize="medium")
