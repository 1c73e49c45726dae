"""`esp bench multistage`: three ways to control a two-stage job, on the real stack, in one run
(BENCHMARKS.md section 9; issue 17, seed 002).

The job (`benchmarks.multistage_job`): word counts (stage `main`), then word updates per bucket
(stage `buckets`), the latter made the bottleneck by its own per-record cost
(`--downstream-ms`, against `--main-ms` for `main`). The load steps between `--low` and `--high`
(a square trace). Each policy runs on a fresh stream, one after the other, with the same trace:

- `as-stream`: As-Stream's bottleneck ranking (Eq. 6-8) sized by Eq. 9, and the downstream stage
  pre-scaled to the input Eq. 10-11 predict from the arrival rate;
- `reactive`: per stage, from measurements only (the busiest stage grows when the job is congested);
- `together`: the single-stage controller's channel count for both stages.

Per policy: SLO attainment, channel-seconds, decisions, and seconds from each rise of the load to
the downstream stage's scale-out (`prescale_lead_s`), with whether that came before the job's lag
was congested. With `--repetitions`, each figure's median and spread over the runs. JSON + PNG.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.multistage import DOWNSTREAM, FIRST, MultistageOptions, PolicyRun, run_policy
from benchmarks.repeats import spread
from benchmarks.scratch_topics import topics_deleted_after
from orchestration.cli.common import ConfigOption, friendly_errors

POLICIES = ("as-stream", "reactive", "together")
SUMMARY = ("slo_attainment", "channel_seconds", "decisions", "max_p99_s")


def multistage_command(
    json_path: Path = typer.Option(..., "--json", help="Where to write the figures (JSON)."),
    png_path: Path | None = typer.Option(None, "--png", help="Plot per policy (default: next to the JSON)."),
    low: float = typer.Option(50.0, "--low", min=1.0, help="Low input rate of the square trace, records/s."),
    high: float = typer.Option(200.0, "--high", min=1.0, help="High input rate of the square trace, records/s."),
    period: float = typer.Option(120.0, "--period", min=20.0, help="Period of the trace (low half, high half), s."),
    duration: float = typer.Option(240.0, "--duration", min=30.0, help="Length of each policy's trace, s."),
    main_ms: float = typer.Option(1.0, "--main-ms", min=0.0, help="Per-record cost of stage main, ms."),
    downstream_ms: float = typer.Option(
        8.0, "--downstream-ms", min=0.0, help="Per-record cost of stage buckets (the bottleneck), ms."
    ),
    slo: float = typer.Option(15.0, "--slo", min=0.5, help="SLO on the end-to-end p99 probe latency, s."),
    interval: float = typer.Option(
        2.5,
        "--interval",
        min=1.0,
        help="Sampling period of the loop, s (a rise is pre-scaled only if a tick sees it before the lag builds).",
    ),
    max_channels: int = typer.Option(6, "--max-channels", min=1, help="Most channels of a stage (task slots)."),
    max_offsets: int = typer.Option(20000, "--max-offsets", min=1, help="Cap on records per micro-batch."),
    executors: int = typer.Option(1, "--executors", min=1, help="N_executer of Eq. 9."),
    warmup: float = typer.Option(
        30.0, "--warmup", min=0.0, help="Seconds at the low rate before the trace (the loop runs; not in the figures)."
    ),
    policies: str = typer.Option(",".join(POLICIES), "--policies", help="Comma-separated policies to run."),
    repetitions: int = typer.Option(1, "--repetitions", min=1, help="Runs of every policy; figures as medians."),
    simulate: bool = typer.Option(
        False, "--simulate", help="Run the policies on the chain model instead of the real stack (seeds 0, 1, ...)."
    ),
    config: ConfigOption = None,
) -> None:
    """Run the three multi-stage policies on the real stack under one trace; JSON + PNG."""
    from orchestration.stack.project import load_settings

    chosen = tuple(p.strip() for p in policies.split(",") if p.strip())
    if unknown := sorted(set(chosen) - set(POLICIES)):
        raise typer.BadParameter(f"unknown policies {unknown}; choose from {list(POLICIES)}", param_hint="--policies")
    options = MultistageOptions(
        low, high, period, duration, main_ms, downstream_ms, slo, interval, max_channels, max_offsets, executors, warmup
    )
    console = Console()
    runs: dict[str, list[PolicyRun]] = {p: [] for p in chosen}
    if simulate:
        from benchmarks.multistage_sim import simulate_policy

        for seed in range(repetitions):
            for policy in chosen:
                runs[policy].append(simulate_policy(policy, options, seed))
        _report(runs, options, json_path, png_path, console, "the chain model")
        return
    with friendly_errors():
        settings = load_settings(config)
        with (
            topics_deleted_after(settings.kafka.connection),
            Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            ) as progress,
        ):
            for repetition in range(repetitions):
                for policy in chosen:
                    task = progress.add_task(f"run {repetition + 1}/{repetitions}: {policy}", total=int(duration))
                    runs[policy].append(
                        run_policy(
                            settings,
                            policy,
                            options,
                            on_second=lambda p, task=task: progress.update(
                                task, completed=min(int(p.elapsed_s), int(duration))
                            ),
                        )
                    )
    _report(runs, options, json_path, png_path, console, "real Kafka + Spark")


def _report(
    runs: dict[str, list[PolicyRun]],
    options: MultistageOptions,
    json_path: Path,
    png_path: Path | None,
    console: Console,
    stack: str,
) -> None:
    """The figures as JSON, the median runs as a PNG, a table on the console."""
    figures = summarize(runs, options) | {"stack": stack}
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(figures, indent=2, default=str))
    png = png_path or json_path.with_suffix(".png")
    write_plot({p: median_run(r) for p, r in runs.items()}, options, png)
    console.print(figures_table(figures))
    console.print(f"JSON: {json_path}   PNG: {png}")


def median_run(runs: list[PolicyRun]) -> PolicyRun:
    """The run whose channel-seconds are the median (the lower of an even count: a real run)."""
    order = sorted(runs, key=lambda r: r.figures["channel_seconds"])
    return order[(len(order) - 1) // 2]


def summarize(runs: dict[str, list[PolicyRun]], options: MultistageOptions) -> dict[str, Any]:
    """Per policy: the median run's figures plus each figure's median and spread over the runs;
    and the ratios the issue asks about (as-stream against together)."""
    out: dict[str, Any] = {"options": options.__dict__, "stages": [FIRST, DOWNSTREAM], "policies": {}}
    for policy, policy_runs in runs.items():
        median = median_run(policy_runs).figures
        out["policies"][policy] = {
            **median,
            "repetitions": {name: spread([r.figures[name] for r in policy_runs]) for name in SUMMARY},
            "runs": [{name: r.figures[name] for name in (*SUMMARY, "prescale_lead_s", "steps")} for r in policy_runs],
        }
    found = out["policies"]
    if "as-stream" in found and "together" in found:
        a, c = found["as-stream"]["repetitions"], found["together"]["repetitions"]
        out["as_stream_vs_together"] = {
            "channel_seconds_ratio": a["channel_seconds"]["median"] / c["channel_seconds"]["median"],
            "slo_attainment_difference": a["slo_attainment"]["median"] - c["slo_attainment"]["median"],
        }
    return out


def figures_table(figures: dict[str, Any]) -> Table:
    table = Table(title=f"Two-stage job under a square trace ({figures['stack']}; medians over the runs)")
    for column in ("policy", "SLO attainment", "channel-seconds", "decisions", "rise -> downstream scale-out (s)"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for policy, found in figures["policies"].items():
        reps = found["repetitions"]
        leads = ", ".join("-" if s is None else f"{s:.0f}" for s in found["prescale_lead_s"])
        before = sum(1 for s in found["steps"] if s["before_congestion"])
        table.add_row(
            policy,
            f"{reps['slo_attainment']['median']:.3f}",
            f"{reps['channel_seconds']['median']:,.0f}",
            f"{reps['decisions']['median']:.0f}",
            f"{leads} ({before}/{len(found['steps'])} before congestion)",
        )
    return table


def write_plot(runs: dict[str, PolicyRun], options: MultistageOptions, path: Path) -> None:
    """Per policy one column: input rate, channels per stage, end-to-end p99 against the SLO."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, len(runs), figsize=(5 * len(runs), 8), sharex=True, squeeze=False)
    for column, (policy, run) in enumerate(runs.items()):
        seconds = range(len(run.target_rps))
        rate, channels, latency = axes[0][column], axes[1][column], axes[2][column]
        rate.plot(seconds, run.target_rps, label="target")
        rate.plot(range(len(run.sent_rps)), run.sent_rps, label="sent", alpha=0.6)
        rate.set_title(policy)
        rate.set_ylabel("records/s")
        rate.legend(loc="upper left")
        for stage, series in run.channels.items():
            channels.step(range(len(series)), series, where="post", label=stage)
        channels.set_ylabel("channels")
        channels.set_ylim(0, options.max_channels + 0.5)
        channels.legend(loc="upper left")
        latency.plot(seconds, run.p99_s[: len(run.target_rps)], label="p99 end to end")
        latency.axhline(options.slo_s, color="red", linestyle="--", label="SLO")
        latency.set_ylabel("s")
        latency.set_xlabel("seconds")
        latency.legend(loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
