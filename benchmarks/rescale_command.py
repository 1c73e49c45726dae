"""`esp bench rescale`: the online elastic rescale's pause against Spark's offline state
repartition (stop → repartition → restart), at several state sizes, in one run.

Starts its own Kafka broker on free ports (unless `--bootstrap` names one) and one Spark
session, runs `benchmarks.rescale` for every size, writes JSON and a PNG (pause vs state
size, both systems, log scale) and prints the figures against the issue's targets.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from elasticity.state.kinds import describe_store_kinds, store_kind_named
from orchestration.cli.common import ConfigOption, console, friendly_errors
from orchestration.stack.ports import free_port

PAUSE_RATIO_TARGET = 5.0
MOVED_OVER_IDEAL_TARGET = 1.15


@contextmanager
def bench_broker(settings, bootstrap: str | None) -> Iterator[str]:
    """The broker to benchmark against: `bootstrap` if given (the topics the run makes there are
    deleted at its end, `benchmarks.scratch_topics`), else a private KRaft broker on free ports in a
    temporary folder (so a benchmark never touches anyone's topics)."""
    if bootstrap:
        from benchmarks.scratch_topics import topics_deleted_after

        with topics_deleted_after(bootstrap):
            yield bootstrap
        return
    from orchestration.stack.jvm import ensure_jars
    from orchestration.stack.kafka_broker import KafkaBroker
    from orchestration.stack.project import jvm_layout
    from pipelines.settings import KafkaSettings

    ensure_jars(jvm_layout(settings))
    kafka = KafkaSettings(client_port=free_port(), controller_port=free_port(), heap="1g")
    with tempfile.TemporaryDirectory(prefix="esp-bench-kafka-") as run_dir:
        broker = KafkaBroker(kafka, Path(run_dir), jvm_layout(settings))
        broker.up()
        try:
            yield kafka.bootstrap_servers
        finally:
            broker.down()


def bench_spark(settings, shuffle_partitions: int, slots: int | None = None):
    """The one Spark session of a benchmark run (no UI, no console progress bars); with `slots`,
    a local master with that many task slots (a stage whose channels wait on I/O may have more
    channels than the machine has cores, but not more than task slots)."""
    from pipelines.spark_session import build_spark_session

    update = {
        "ui_enabled": False,
        "shuffle_partitions": shuffle_partitions,
        "app_name": "esp-bench",
        "conf": {**settings.spark.conf, "spark.ui.showConsoleProgress": "false"},
    }
    if slots is not None:
        update["master"] = f"local[{slots}]"
    spark_settings = settings.spark.model_copy(update=update)
    spark = build_spark_session(settings.model_copy(update={"spark": spark_settings}))
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def parse_sizes(text: str) -> tuple[int, ...]:
    """ "1e4,1e5,1e6" -> (10000, 100000, 1000000)."""
    try:
        sizes = tuple(int(float(part)) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"--keys wants comma-separated numbers like 1e4,1e5, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise ValueError("--keys needs at least one positive size")
    return sizes


def rescale_command(
    keys: str = typer.Option("1e4,1e5,1e6", "--keys", help="State sizes (distinct keys), comma-separated."),
    from_channels: int = typer.Option(4, "--from", min=1, help="Channels / state partitions before the rescale."),
    to_channels: int = typer.Option(5, "--to", min=1, help="Channels / state partitions after it."),
    json_out: Path = typer.Option(Path("out/bench/rescale.json"), "--json", help="Where to write the JSON results."),
    png_out: Path | None = typer.Option(None, "--png", help="Plot path (default: next to the JSON, .png)."),
    bootstrap: str | None = typer.Option(None, help="Use this broker instead of starting a private one."),
    chunk_lines: int = typer.Option(200, help="Lines the first batch after the rescale processes (both systems)."),
    trigger: float = typer.Option(0.5, help="Micro-batch trigger interval of both queries, seconds."),
    workdir: Path | None = typer.Option(None, help="Folder for checkpoints and state (default: a temporary one)."),
    repetitions: int = typer.Option(
        1, min=1, help="Runs of each system per size; figures are each system's median-pause run."
    ),
    store_kind: str = typer.Option(
        "rocks", "--store-kind", help=f"The elastic stream's channel store. {describe_store_kinds()}."
    ),
    config: ConfigOption = None,
) -> None:
    """Online rescale pause vs stop → offline repartition → restart, per state size (JSON + PNG)."""
    from benchmarks.rescale import STEPS_PER_SIZE, RescaleOptions, run_rescale_benchmark
    from orchestration.stack.project import load_settings

    with friendly_errors():
        if from_channels == to_channels:
            raise ValueError("--from and --to must differ")
        sizes = parse_sizes(keys)
        settings = load_settings(config)
        with (
            tempfile.TemporaryDirectory(prefix="esp-bench-rescale-") as scratch,
            bench_broker(settings, bootstrap) as servers,
        ):
            options = RescaleOptions(
                keys=sizes,
                from_channels=from_channels,
                to_channels=to_channels,
                chunk_lines=chunk_lines,
                trigger_seconds=trigger,
                workdir=str(workdir or scratch),
                repetitions=repetitions,
                store_kind=store_kind_named(store_kind),
            )
            spark = bench_spark(settings, from_channels)
            with _progress() as progress:
                task = progress.add_task("rescale benchmark", total=STEPS_PER_SIZE * len(sizes) * repetitions)

                def step(description: str) -> None:
                    progress.update(task, advance=1, description=description)

                results = run_rescale_benchmark(spark, servers, options, step)
    results["targets"] = {"pause_ratio_at_largest": PAUSE_RATIO_TARGET, "moved_over_ideal": MOVED_OVER_IDEAL_TARGET}
    results["command"] = (
        f"esp bench rescale --keys {keys} --from {from_channels} --to {to_channels} "
        f"--repetitions {repetitions} --json {json_out}"
    )
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(results, indent=2, default=str))
    png = png_out if png_out is not None else json_out.with_suffix(".png")
    plot_pauses(results, png)
    console.print(pause_table(results))
    console.print(f"wrote {json_out} and {png}")


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def _fmt(value: Any, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def pause_table(results: dict[str, Any]) -> Table:
    table = Table(title=f"esp bench rescale ({_channels(results)})")
    for column in (
        "keys",
        "esp pause s",
        "native pause s",
        "ratio",
        "esp migration s",
        "native repartition s",
        "esp moved",
        "ideal",
        "moved/ideal",
        "native rewritten",
        "correct",
    ):
        table.add_column(column, justify="right")
    largest = max(s["keys"] for s in results["sizes"])
    for s in results["sizes"]:
        ratio_ok = s["pause_ratio"] is not None and s["pause_ratio"] >= PAUSE_RATIO_TARGET
        moved_ok = s["moved_over_ideal"] is not None and s["moved_over_ideal"] <= MOVED_OVER_IDEAL_TARGET
        ratio = _fmt(s["pause_ratio"], ".1f")
        if s["keys"] == largest:
            ratio = f"[green]{ratio}[/]" if ratio_ok else f"[red]{ratio}[/]"
        table.add_row(
            f"{s['keys']:,}",
            _fmt(s["esp_pause_s"], ".2f"),
            _fmt(s["native_pause_s"], ".2f"),
            ratio,
            _fmt(s.get("esp_migration_s"), ".3f"),
            _fmt(s.get("native_repartition_s"), ".2f"),
            _fmt(s["esp_moved_fraction"], ".4f"),
            _fmt(s["ideal_fraction"], ".4f"),
            f"[green]{s['moved_over_ideal']:.3f}[/]" if moved_ok else f"[red]{_fmt(s['moved_over_ideal'], '.3f')}[/]",
            _fmt(s["native_rewritten_fraction"], ".2f"),
            "[green]yes[/]" if s["esp_correct"] and s["native_correct"] else "[red]NO[/]",
        )
    return table


def _channels(results: dict[str, Any]) -> str:
    options = results["options"]
    return f"{options['from_channels']} → {options['to_channels']}"


def plot_pauses(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = results["sizes"]
    keys = [s["keys"] for s in sizes]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(keys, [s["esp_pause_s"] for s in sizes], "o-", label="esp online donate/collect")
    ax.plot(keys, [s["native_pause_s"] for s in sizes], "s-", label="Spark stop → repartition → restart")
    for s in sizes:
        if s["pause_ratio"]:
            ax.annotate(
                f"×{s['pause_ratio']:.1f}", (s["keys"], s["native_pause_s"]), textcoords="offset points", xytext=(4, 4)
            )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="state size (distinct keys)",
        ylabel="pause (s)",
        title=f"rescale pause, {_channels(results)} channels",
    )
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
