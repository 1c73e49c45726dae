"""`esp load …`: synthetic load to Kafka — paced runs over a rate profile, and fast pre-loads.

    esp load run --profile esault --peak 20000 --duration 120 --topic words --kind words --dist zipf --zipf-s 1.1
    esp load preload --records 2000000 --topic words

Both show a rich progress bar (records sent, achieved rate) and end with a summary table;
`--json` writes the figures, `--plot` a PNG of target vs achieved rate per second.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from orchestration.cli.common import ConfigOption, console, friendly_errors
from pipelines.load.spec import LoadSpec

if TYPE_CHECKING:
    from pipelines.load import LoadProgress, LoadReport
    from pipelines.settings import KafkaConnection

load_app = typer.Typer(
    help="Synthetic load to Kafka: word-count lines or ad events at a target rate.", no_args_is_help=True
)

RATE_WINDOW_S = 2.0  # the progress bar's achieved rate is measured over this many seconds


def _spec_option(name: str, *flags: str, **limits: Any) -> Any:
    """A Typer option for LoadSpec's field `name`: left out (None), the spec keeps its own default,
    which the help shows; the help is the field's description."""
    spec_field = LoadSpec.model_fields[name]
    shown = False if spec_field.default is None else str(spec_field.default)
    return typer.Option(None, *flags, help=spec_field.description, show_default=shown, **limits)


# Options of LoadSpec's fields (what records, where to, at what rate).
ProfileOpt = _spec_option("profile", "--profile", "-p")
PeakOpt = _spec_option("peak_rate", "--peak", min=0.001)
BaseOpt = _spec_option("base_rate", "--base", min=0.0)
DurationOpt = _spec_option("duration_s", "--duration", "-d", min=0.001)
SpeedOpt = _spec_option("speed", "--speed", min=0.001)
TopicOpt = _spec_option("topic", "--topic", "-t")
KindOpt = _spec_option("kind", "--kind")
DistOpt = _spec_option("distribution", "--dist")
ZipfOpt = _spec_option("zipf_s", "--zipf-s", min=0.0)
VocabOpt = _spec_option("vocabulary", "--vocabulary", min=1)
WordsOpt = _spec_option("words_per_line", "--words-per-line", min=1)
KeyOpt = _spec_option("key", "--key")
LateOpt = _spec_option("late_fraction", "--late-fraction", min=0.0, max=1.0)
LateByOpt = _spec_option("late_by_s", "--late-by", min=0.0)
SeedOpt = _spec_option("seed", "--seed", min=0)
ProcessesOpt = _spec_option("processes", "--processes", "-P", min=0)
BootstrapOpt = typer.Option(None, "--bootstrap", help="Kafka bootstrap servers; default from the esp settings.")
JsonOpt = typer.Option(None, "--json", help="Write the summary (and per-second series) as JSON here.")


@contextmanager
def _load_errors() -> Iterator[None]:
    """friendly_errors, plus a failed producer process."""
    from pipelines.load import LoadError

    with friendly_errors():
        try:
            yield
        except LoadError as err:
            console.print(f"[bold red]error:[/] {err}")
            raise typer.Exit(code=1) from None


def _connection(config: Path | None, bootstrap: str | None, topic: str) -> KafkaConnection:
    """The broker (--bootstrap or the settings') with the settings' client security, once it
    answered and the topic exists (before any progress bar)."""
    from orchestration.stack.project import load_settings
    from pipelines.kafka_topics import require_topics
    from pipelines.settings import KafkaConnection

    kafka = load_settings(config).kafka
    connection = KafkaConnection(bootstrap or kafka.bootstrap_servers, kafka.security)
    with console.status(f"checking topic {topic} at {connection}…"):
        require_topics(connection, [topic])
    return connection


class _RateTracker:
    """Achieved rate over the last few seconds, from cumulative (time, sent) samples."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()

    def update(self, now: float, sent: int) -> float:
        self._samples.append((now, sent))
        while len(self._samples) > 2 and now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()
        t0, s0 = self._samples[0]
        return (sent - s0) / (now - t0) if now > t0 else 0.0


def _progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>9,.0f} rec/s{task.fields[target]}"),
        TimeElapsedColumn(),
        console=console,
    )


def _run_with_progress(label: str, total: int, start: Any, target_rate: Any | None) -> LoadReport:
    """Call start(on_progress) under a progress bar fed by its LoadProgress updates;
    target_rate(t) adds the profile's current rate (paced runs)."""
    tracker = _RateTracker()
    with _progress_bar() as bar:
        task = bar.add_task(label, total=total, rate=0.0, target="")

        def on_progress(p: LoadProgress) -> None:
            rate = tracker.update(time.monotonic(), p.sent)
            target = f"  (target {target_rate(p.elapsed_s):,.0f} rec/s)" if target_rate else ""
            bar.update(task, completed=min(p.sent, total), rate=rate, target=target)

        return start(on_progress)


def _summary_table(report: LoadReport) -> Table:
    table = Table("figure", "value", title=f"load on {report.spec.topic}")
    paced = bool(report.per_second_target)  # pre-loads have no target series
    rows = [
        ("kind / profile", f"{report.spec.kind} / {report.spec.profile if paced else 'pre-load'}"),
        ("producer processes", str(report.processes)),
        ("records sent", f"{report.records_sent:,}"),
        ("target records", f"{report.target_records:,}"),
        ("dropped (producers behind)", f"{report.dropped:,}"),
        ("errors (not acknowledged)", f"{report.errors:,}"),
        ("target mean rate", f"{report.target_mean_rps:,.0f} rec/s" if paced else "as fast as possible"),
        ("achieved mean rate", f"{report.achieved_mean_rps:,.0f} rec/s"),
        ("elapsed", f"{report.elapsed_s:.1f} s"),
    ]
    if report.spec.kind == "ads":
        rows.append(("late events", f"{report.late_records:,}"))
    if report.stopped_early:
        rows.append(("stopped early", "yes"))
    for name, value in rows:
        table.add_row(name, value)
    return table


def plot_rates(report: LoadReport, path: Path) -> None:
    """PNG of target vs achieved records per second."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4))
    if report.per_second_target:
        ax.step(range(len(report.per_second_target)), report.per_second_target, where="post", label="target")
    ax.step(range(len(report.per_second_sent)), report.per_second_sent, where="post", label="achieved")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("records / s")
    ax.set_title(f"esp load: {report.spec.profile} on {report.spec.topic} ({report.processes} process(es))")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _finish(report: LoadReport, json_path: Path | None, plot_path: Path | None, with_counts: bool) -> None:
    console.print(_summary_table(report))
    if report.first_error:
        console.print(f"[yellow]first delivery error:[/] {report.first_error}")
    if json_path is not None:
        data: dict[str, Any] = report.summary()
        if with_counts:
            data["counts"] = report.counts
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(data, indent=1))
        console.print(f"summary written to {json_path}")
    if plot_path is not None:
        plot_rates(report, plot_path)
        console.print(f"plot written to {plot_path}")


def _spec(**fields: Any) -> LoadSpec:
    """The LoadSpec of the options given; the ones left out (None) keep LoadSpec's defaults."""
    return LoadSpec(**{k: v for k, v in fields.items() if v is not None})


@load_app.command("run")
def run_command(
    profile: str | None = ProfileOpt,
    peak: float | None = PeakOpt,
    base: float | None = BaseOpt,
    duration: float | None = DurationOpt,
    speed: float | None = SpeedOpt,
    topic: str | None = TopicOpt,
    kind: str | None = KindOpt,
    dist: str | None = DistOpt,
    zipf_s: float | None = ZipfOpt,
    vocabulary: int | None = VocabOpt,
    words_per_line: int | None = WordsOpt,
    key: str | None = KeyOpt,
    late_fraction: float | None = LateOpt,
    late_by: float | None = LateByOpt,
    seed: int | None = SeedOpt,
    processes: int | None = ProcessesOpt,
    bootstrap: str | None = BootstrapOpt,
    json_path: Path | None = JsonOpt,
    plot_path: Path | None = typer.Option(None, "--plot", help="Write a PNG of target vs achieved rate here."),
    counts: bool = typer.Option(False, "--counts/--no-counts", help="Include the per-key counts sent in the JSON."),
    config: ConfigOption = None,
) -> None:
    """Produce records at the profile's target rate until its duration ends (Ctrl-C stops and flushes)."""
    from pipelines.load import rate_profile, run_load

    with _load_errors():
        spec = _spec(
            profile=profile, peak_rate=peak, base_rate=base, duration_s=duration, speed=speed, topic=topic, kind=kind,
            distribution=dist, zipf_s=zipf_s, vocabulary=vocabulary, words_per_line=words_per_line, key=key,
            late_fraction=late_fraction, late_by_s=late_by, seed=seed, processes=processes,
        )  # fmt: skip
        servers = _connection(config, bootstrap, spec.topic)
        target = rate_profile(spec)
        console.print(
            f"{spec.profile} load of {spec.kind} to [bold]{spec.topic}[/] at {servers}: "
            f"peak {spec.peak_rate:,.0f} rec/s, "
            f"{target.duration_s:.0f} s, {spec.producer_processes()} producer process(es)"
        )
        report = _run_with_progress(
            "sending",
            target.total_records,
            lambda on_progress: run_load(spec, servers, on_progress=on_progress),
            lambda t: float(target.rate_at(min(t, target.duration_s - 1e-6))),  # the last rate at the end
        )
        _finish(report, json_path, plot_path, counts)


@load_app.command("preload")
def preload_command(
    records: int = typer.Option(..., "--records", "-n", min=1, help="Exactly this many records."),
    topic: str | None = TopicOpt,
    kind: str | None = KindOpt,
    dist: str | None = DistOpt,
    zipf_s: float | None = ZipfOpt,
    vocabulary: int | None = VocabOpt,
    words_per_line: int | None = WordsOpt,
    key: str | None = KeyOpt,
    seed: int | None = SeedOpt,
    processes: int = typer.Option(0, "--processes", "-P", min=0, help="Producer processes; 0 = one per CPU."),
    bootstrap: str | None = BootstrapOpt,
    json_path: Path | None = JsonOpt,
    counts: bool = typer.Option(False, "--counts/--no-counts", help="Include the per-key counts sent in the JSON."),
    config: ConfigOption = None,
) -> None:
    """Fill a topic with exactly N records as fast as possible (benchmark input)."""
    from pipelines.load import preload

    with _load_errors():
        spec = _spec(
            topic=topic, kind=kind, distribution=dist, zipf_s=zipf_s, vocabulary=vocabulary,
            words_per_line=words_per_line, key=key, seed=seed, processes=processes,
        )  # fmt: skip
        servers = _connection(config, bootstrap, spec.topic)
        console.print(f"pre-loading {records:,} {spec.kind} records to [bold]{spec.topic}[/] at {servers}")
        report = _run_with_progress(
            "pre-loading",
            records,
            lambda on_progress: preload(spec, servers, records, on_progress=on_progress),
            None,
        )
        _finish(report, json_path, None, counts)
