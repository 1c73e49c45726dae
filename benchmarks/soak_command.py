"""`esp soak`: the exactly-once promise under seeded SIGKILLs and rescales, on the real stack.

Starts a private broker, runs the word-count stream under a varying load for `--minutes` while
`benchmarks.soak.Soak` kills and rescales it, then checks results and state against the input
topic. Writes a JSON report (top-level `rescales`, `kills`, `lost`, `doubled`, `violations`,
`kills_by_point`) and a PNG timeline of faults, rescales, lag and channels. Exits 1 when
anything was lost, doubled or violated.
"""

from __future__ import annotations

import json
import socket
import tempfile
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from benchmarks.soak import FAULTS, BrokerHandle, Soak, SoakOptions, SoakReport
from orchestration.cli.common import ConfigOption, console, friendly_errors

KIND_COLOURS = {
    "driver": "tab:red",
    "driver_mid_batch_with_request": "tab:purple",
    "python_worker": "tab:orange",
    "migration_phase": "tab:pink",
    "snapshot_write": "tab:olive",
    "broker": "tab:brown",
    "second_driver": "tab:gray",
    "rescale": "tab:green",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def soak_command(
    minutes: float = typer.Option(30.0, min=0.5, help="How long faults are injected (catch-up and checks come after)."),
    seed: int = typer.Option(7, help="Seed of the load and of the fault schedule."),
    json_out: Path = typer.Option(Path("out/soak/soak.json"), "--json", help="Where to write the JSON report."),
    png: Path | None = typer.Option(None, help="Timeline plot (default: next to the JSON, .png)."),
    min_gap: float = typer.Option(4.0, min=0.5, help="Shortest pause between two faults, seconds."),
    max_gap: float = typer.Option(20.0, min=1.0, help="Longest pause between two faults, seconds."),
    peak: float = typer.Option(400.0, min=10.0, help="Peak input, lines/s (the load varies below it)."),
    faults: str = typer.Option(
        ",".join(FAULTS), help="Comma-separated faults to draw from: " + ", ".join(FAULTS) + "."
    ),
    config: ConfigOption = None,
) -> None:
    """Kill and rescale a stream at seeded random times; check nothing was lost or doubled."""
    from orchestration.stack.project import load_settings

    with friendly_errors():
        chosen = tuple(f.strip() for f in faults.split(",") if f.strip())
        if not chosen or (unknown := set(chosen) - set(FAULTS)):
            raise ValueError(f"--faults: unknown or no fault {sorted(unknown) if chosen else ''}; known: {FAULTS}")
        settings = load_settings(config)
        with tempfile.TemporaryDirectory(prefix="esp-soak-") as folder:
            report = _run(settings, Path(folder), minutes, seed, (min_gap, max(max_gap, min_gap)), peak, chosen)
    json_out.parent.mkdir(parents=True, exist_ok=True)
    results = report.to_json()
    json_out.write_text(json.dumps(results, indent=2))
    plot = png or json_out.with_suffix(".png")
    write_timeline(report, plot)
    console.print(summary_table(results))
    console.print(f"report {json_out}, timeline {plot}")
    if report.lost or report.doubled or report.violations:
        raise typer.Exit(code=1)


def _run(
    settings, folder: Path, minutes: float, seed: int, gaps: tuple[float, float], peak: float, faults: tuple[str, ...]
) -> SoakReport:
    from orchestration.stack.jvm import ensure_jars
    from orchestration.stack.kafka_broker import KafkaBroker
    from orchestration.stack.project import jvm_layout
    from pipelines.kafka_topics import TopicSpec, ensure_topics
    from pipelines.settings import KafkaSettings

    ensure_jars(jvm_layout(settings))
    kafka = KafkaSettings(client_port=_free_port(), controller_port=_free_port(), heap="1g")
    broker = KafkaBroker(kafka, folder / "run", jvm_layout(settings))
    broker.up()
    try:
        topic = "words"  # the catalog's word-count input: the broker is the soak's own
        ensure_topics(kafka.bootstrap_servers, [TopicSpec(name=topic, partitions=4)])
        stream_config = folder / "esp.json"
        stream_config.write_text(
            json.dumps(
                {
                    "run_dir_name": str(folder / "run"),
                    "kafka": {"host": "127.0.0.1", "client_port": kafka.client_port},
                    "spark": {"master": "local[2]", "ui_enabled": False, "shuffle_partitions": 4},
                }
            )
        )
        options = SoakOptions(
            minutes=minutes,
            seed=seed,
            folder=folder,
            bootstrap=kafka.bootstrap_servers,
            config=stream_config,
            min_gap_s=gaps[0],
            max_gap_s=gaps[1],
            peak_lines_per_s=peak,
            faults=faults,
        )
        with console.status("soaking…") as status:
            soak = Soak(options, BrokerHandle(broker), topic, lambda text: status.update(f"soak: {text}"))
            try:
                return soak.run()
            finally:
                soak.stream.kill()
    finally:
        broker.down()


def summary_table(results: dict[str, Any]) -> Table:
    table = Table("figure", "value", title="esp soak")
    for key in ("rescales", "kills", "lost", "doubled", "words_checked"):
        table.add_row(key, str(results[key]))
    for point, count in sorted(results["kills_by_point"].items()):
        table.add_row(f"  {point}", str(count))
    table.add_row("violations", "\n".join(results["violations"]) or "none")
    return table


def write_timeline(report: SoakReport, path: Path) -> None:
    """Lag and channels over time, with a marker per fault and rescale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lag_ax, channel_ax) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    if report.lag:
        lag_ax.plot(*zip(*report.lag), color="tab:blue", linewidth=1)
    lag_ax.set_ylabel("lag (records)")
    if report.channels:
        channel_ax.step(*zip(*report.channels), where="post", color="black", linewidth=1)
    channel_ax.set_ylabel("channels")
    channel_ax.set_xlabel("seconds since start")
    seen: set[str] = set()
    for event in report.events:
        colour = KIND_COLOURS.get(event.kind, "tab:gray")
        for ax in (lag_ax, channel_ax):
            ax.axvline(
                event.at_s, color=colour, alpha=0.6, linewidth=1, label=None if event.kind in seen else event.kind
            )
            seen.add(event.kind)
    lag_ax.legend(loc="upper right", fontsize=7)
    lag_ax.set_title(
        f"esp soak (seed {report.seed}): {report.rescales} rescales, {sum(report.kills.values())} kills, "
        f"lost {report.lost}, doubled {report.doubled}, violations {len(report.violations)}"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
