"""`esp soak`: the exactly-once promise under seeded SIGKILLs and rescales, on the real stack.

Starts a private broker, runs the word-count stream under a varying load for `--minutes` while
`benchmarks.soak.Soak` kills and rescales it, then checks results and state against the input
topic. Writes a JSON report (top-level `rescales`, `kills`, `lost`, `doubled`, `violations`,
`kills_by_point`) and a PNG timeline of faults, rescales, lag and channels. Exits 1 when
anything was lost, doubled or violated.

`--no-kills` makes it an endurance run: rescales only, every topic's retention cut to
`--retention-minutes`, and every resource (folders, files, broker log, Dagster's storage, memory)
judged flat after the first retention cycle; a second PNG (`*.resources.png`) plots them.

`--admission-high` (and `--admission-low`) runs every stream with admission control on (off by
default); the report's `options` say so, and its `admission` says per stream how many batches
were capped and how often the cap changed.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from benchmarks.soak import DAGSTER_FAULTS, FAULTS, KILL_POINTS, BrokerHandle, Soak, SoakOptions, SoakReport
from benchmarks.soak_jobs import JOBS
from orchestration.cli.common import (
    AdmissionHighOption,
    AdmissionLowOption,
    ConfigOption,
    admission_options,
    console,
    friendly_errors,
)
from orchestration.stack.ports import free_port

KIND_COLOURS = {
    "driver": "tab:red",
    "driver_mid_batch_with_request": "tab:pink",
    "python_worker": "tab:orange",
    "migration_phase": "magenta",
    "snapshot_write": "tab:olive",
    "dagster_daemon": "tab:cyan",
    "code_server": "tab:purple",
    "broker": "tab:brown",
    "second_driver": "tab:gray",
    "rescale": "tab:green",
}


# An endurance run's topic retention: long enough for any catch-up, short enough that a
# 60-minute run sees several retention cycles.
ENDURANCE_RETENTION_MINUTES = 10.0


def soak_command(
    minutes: float = typer.Option(30.0, min=0.5, help="How long faults are injected (catch-up and checks come after)."),
    seed: int = typer.Option(7, help="Seed of the load and of the fault schedule."),
    json_out: Path = typer.Option(Path("out/soak/soak.json"), "--json", help="Where to write the JSON report."),
    png: Path | None = typer.Option(None, help="Timeline plot (default: next to the JSON, .png)."),
    min_gap: float = typer.Option(4.0, min=0.5, help="Shortest pause between two faults, seconds."),
    max_gap: float = typer.Option(20.0, min=1.0, help="Longest pause between two faults, seconds."),
    peak: float = typer.Option(400.0, min=10.0, help="Peak input, lines/s (the load varies below it)."),
    min_faults: int = typer.Option(
        0, min=0, help="Go on past --minutes until this many faults were drawn (a busy host slows each one)."
    ),
    faults: str = typer.Option(
        ",".join(FAULTS), help="Comma-separated faults to draw from: " + ", ".join(FAULTS) + "."
    ),
    dagster: bool = typer.Option(
        True,
        help="Run a Dagster control room (resize runs, the elasticity sensor) and kill its daemon and code server.",
    ),
    kills: bool = typer.Option(
        True, help="Draw the kill faults; --no-kills is an endurance run: rescales only, resources judged flat."
    ),
    retention_minutes: float | None = typer.Option(
        None, min=1.0, help="Cut every topic's retention to this once the streams run (default: 10 with --no-kills)."
    ),
    admission_high: AdmissionHighOption = None,
    admission_low: AdmissionLowOption = None,
    config: ConfigOption = None,
) -> None:
    """Kill and rescale a stream at seeded random times; check nothing was lost or doubled."""
    from orchestration.stack.project import load_settings

    with friendly_errors():
        chosen = tuple(f.strip() for f in faults.split(",") if f.strip())
        if not chosen or (unknown := set(chosen) - set(FAULTS)):
            raise ValueError(f"--faults: unknown or no fault {sorted(unknown) if chosen else ''}; known: {FAULTS}")
        if not dagster:
            chosen = tuple(f for f in chosen if f not in DAGSTER_FAULTS)
        if not kills:
            chosen = tuple(f for f in chosen if f not in KILL_POINTS)
            retention_minutes = retention_minutes or ENDURANCE_RETENTION_MINUTES
        admission = admission_options(admission_high, admission_low)
        settings = load_settings(config)
        with tempfile.TemporaryDirectory(prefix="esp-soak-") as folder:
            wanted = SoakOptions(
                minutes=minutes,
                seed=seed,
                folder=Path(folder),
                bootstrap="",  # the soak's own broker's, once it is up
                config=Path(folder) / "esp.json",
                min_gap_s=min_gap,
                max_gap_s=max(max_gap, min_gap),
                peak_lines_per_s=peak,
                min_faults=min_faults,
                faults=chosen,
                dagster=dagster,
                retention_s=retention_minutes * 60 if retention_minutes else None,
                admission_high_s=admission.high_watermark_s if admission else None,
                admission_low_s=admission.low_watermark_s if admission else None,
            )
            report = _run(settings, wanted)
    json_out.parent.mkdir(parents=True, exist_ok=True)
    results = report.to_json()
    json_out.write_text(json.dumps(results, indent=2))
    plot = png or json_out.with_suffix(".png")
    write_timeline(report, plot)
    if report.trends:
        write_resources(report, plot.with_suffix(".resources.png"))
    console.print(summary_table(results))
    console.print(f"report {json_out}, timeline {plot}")
    if report.lost or report.doubled or report.violations:
        raise typer.Exit(code=1)


def _run(settings, wanted: SoakOptions) -> SoakReport:
    from orchestration.stack.jvm import ensure_jars
    from orchestration.stack.kafka_broker import KafkaBroker
    from orchestration.stack.project import jvm_layout
    from pipelines.kafka_topics import TopicSpec, ensure_topics
    from pipelines.settings import KafkaSettings

    folder = wanted.folder
    ensure_jars(jvm_layout(settings))
    kafka = KafkaSettings(client_port=free_port(), controller_port=free_port(), heap="1g")
    broker = KafkaBroker(kafka, folder / "run", jvm_layout(settings))
    broker.up()
    try:
        # The catalog's topics (the broker is the soak's own), so Dagster acts on the soaked streams.
        ensure_topics(kafka.bootstrap_servers, [TopicSpec(name=JOBS[j].topic, partitions=4) for j in wanted.jobs])
        wanted.config.write_text(
            json.dumps(
                {
                    "project_root": str(settings.project_root),
                    "run_dir_name": str(folder / "run"),
                    "kafka": {"host": "127.0.0.1", "client_port": kafka.client_port},
                    "spark": {"master": "local[2]", "ui_enabled": False, "shuffle_partitions": 4},
                }
            )
        )
        options = replace(wanted, bootstrap=kafka.bootstrap_servers)
        with console.status("soaking…") as status:
            soak = Soak(options, BrokerHandle(broker), lambda text: status.update(f"soak: {text}"))
            try:
                return soak.run()
            finally:
                for stream in soak.streams:
                    stream.kill()
    finally:
        broker.down()


def summary_table(results: dict[str, Any]) -> Table:
    table = Table("figure", "value", title="esp soak")
    for key in ("rescales", "kills", "lost", "doubled", "dead_letters_found", "control_room_restarts"):
        table.add_row(key, str(results[key]))
    for job, keys in sorted(results["keys_checked"].items()):
        table.add_row(f"  {job} keys checked", str(keys))
    for outcome, count in sorted(results["dagster_runs"].items()):
        table.add_row(f"  resize runs {outcome}", str(count))
    for point, count in sorted(results["kills_by_point"].items()):
        table.add_row(f"  {point}", str(count))
    options = results.get("options") or {}
    high, low = options.get("admission_high_s"), options.get("admission_low_s")
    low_text = "default" if low is None else f"{low:g} s"
    table.add_row("admission", "off" if high is None else f"on (high {high:g} s, low {low_text})")
    for job, done in sorted((results.get("admission") or {}).items()):
        table.add_row(
            f"  {job} capped batches",
            f"{done['capped_batches']}/{done['batches']}, cap changes {done['cap_changes']}, "
            f"query restarts {done['query_restarts']}",
        )
    for trend in results["endurance"]["trends"]:
        table.add_row(f"  {trend['name']}", f"{trend['start']:.0f} -> {trend['end']:.0f} ({trend['per_hour']:+.0f}/h)")
    table.add_row("violations", "\n".join(results["violations"]) or "none")
    return table


def write_timeline(report: SoakReport, path: Path) -> None:
    """Lag and channels over time, with a marker per fault and rescale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lag_ax, channel_ax, resource_ax) = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
    if report.lag:
        lag_ax.plot(*zip(*report.lag), color="tab:blue", linewidth=1)
    lag_ax.set_ylabel("lag (records)")
    if report.channels:
        channel_ax.step(*zip(*report.channels), where="post", color="black", linewidth=1)
    channel_ax.set_ylabel("channels (first stream)")
    if report.resources:
        at = [r.at_s for r in report.resources]
        resource_ax.plot(at, [r.open_files for r in report.resources], linewidth=1, label="open files")
        resource_ax.plot(at, [r.threads for r in report.resources], linewidth=1, label="threads")
        state_ax = resource_ax.twinx()
        state_mib = [(r.state_bytes + r.checkpoint_bytes + r.migrations_bytes) / 2**20 for r in report.resources]
        state_ax.plot(at, state_mib, color="black", linewidth=1, label="state + checkpoint, MiB")
        state_ax.set_ylabel("MiB")
        state_ax.legend(loc="upper right", fontsize=7)
        resource_ax.legend(loc="upper left", fontsize=7)
    resource_ax.set_ylabel("streams' processes")
    resource_ax.set_xlabel("seconds since start")
    seen: set[str] = set()
    for event in report.events:
        colour = KIND_COLOURS.get(event.kind, "tab:gray")
        for ax in (lag_ax, channel_ax, resource_ax):
            ax.axvline(
                event.at_s, color=colour, alpha=0.6, linewidth=1, label=None if event.kind in seen else event.kind
            )
            seen.add(event.kind)
    lag_ax.legend(loc="upper right", fontsize=7)
    lag_ax.set_title(
        f"esp soak (seed {report.seed}): {report.rescales} rescales, {sum(report.kills.values())} kills, "
        f"lost {report.lost}, doubled {report.doubled}, violations {len(report.violations)}"
    )
    _save(fig, path)


# What each endurance figure is, for the plot: (panel, label, divisor to its unit).
RESOURCE_PANELS = (
    ("folders (MiB)", (("stream_bytes", "streams' folders"), ("dagster_bytes", "Dagster storage")), 2**20),
    ("broker log (MiB)", (("broker_log_bytes", "topics' logs"),), 2**20),
    (
        "memory (MiB)",
        (("jvm_rss", "Spark JVMs"), ("driver_rss", "drivers (esp stream run)"), ("worker_rss", "Python workers")),
        2**20,
    ),
    ("count", (("stream_files", "files in streams' folders"), ("open_files", "open files"), ("threads", "threads")), 1),
)


def write_resources(report: SoakReport, path: Path) -> None:
    """An endurance run's resources over time, the judged window (after the first retention
    cycle) shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(RESOURCE_PANELS), 1, figsize=(11, 10), sharex=True)
    minutes = [r.at_s / 60 for r in report.resources]
    for ax, (unit, figures, divisor) in zip(axes, RESOURCE_PANELS):
        for name, label in figures:
            ax.plot(minutes, [getattr(r, name) / divisor for r in report.resources], linewidth=1, label=label)
        if report.settle_s is not None:
            ax.axvspan(report.settle_s / 60, minutes[-1], color="tab:green", alpha=0.06)
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", fontsize=7)
    axes[-1].set_xlabel("minutes since start (shaded: judged, after the first retention cycle)")
    growing = [v for v in report.violations if "kept growing" in v]
    axes[0].set_title(
        f"esp endurance (seed {report.seed}, topics kept {report.retention_s or 0:.0f} s): "
        f"{report.rescales} rescales, {'growing: ' + str(len(growing)) if growing else 'every figure flat'}"
    )
    _save(fig, path)


def _save(fig, path: Path) -> None:  # fig: matplotlib Figure (imported lazily)
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
