"""`esp bench elasticity`: the elastic loop on the real stack under a fluctuating trace (BENCHMARKS.md section 5).

One run on the real broker and a real Spark stream (`esp stream run` in its own process group,
its keyed stage I/O-bound at `--service-ms` per record, Spark with one task slot per channel):

1. elastic phase: the load generator plays the (time-compressed) trace while a driver runs the
   elasticity sensor's own tick (`tick.decide_tick`: one `ElasticLoop` tick, collector ->
   detectors -> controller -> realizer) every `--interval` seconds; its realizer carries each
   decision out with the resizing asset's own online path (`realizer.rescale_online`: a request
   the stream applies at its next batch boundary);
2. static phase, same stream: for rising channel counts, rescale to N and hold the peak rate
   as long as the played trace's longest hold at its peak (at least `--static-seconds`); the
   best static count is the fewest channels that meet the SLO target at the peak (the peak, for
   as long as the trace holds it, is what a static choice must survive: a count whose backlog
   still grows at the peak can meet the SLO over a shorter segment and miss it in the trace);
3. figures: per load change decisions to settle, overshoot, oscillations, SLO attainment
   (share of seconds whose p99 probe latency is within the SLO; probes still out count with
   their age, so a stalled stream is late, not silent), channel-seconds vs the best static
   count, computed by `benchmarks.control_figures.elasticity_figures` on the measured
   series; JSON + PNG (input rate, channels, p99 latency) + a rich table.

It runs against the broker of the settings (`esp infra up` first); a broker that does not
answer is a one-line error.

The Dagster daemon is not in this loop (the e2e test covers it); here a rescale starts as soon
as it is decided, where a Dagster run would first spend its launch time.
"""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.scratch_topics import topics_deleted_after
from benchmarks.stream_process import start_stream_process, stop_stream_process, stream_settings_file
from orchestration.cli.common import ConfigOption, friendly_errors
from pipelines.settings import KafkaConnection

if TYPE_CHECKING:
    from elasticity.control.traces import Trace
    from orchestration.elasticity.policy import ElasticityPolicy


@dataclass
class BenchOptions:
    """Everything one benchmark run needs (from the command line)."""

    trace: str
    peak_rps: float
    speed: float
    cycles: int
    service_ms: float
    slo_s: float
    interval_s: float
    max_channels: int
    initial_channels: int
    static_seconds: float
    static_target: float
    max_offsets: int
    records_per_channel: int | None = None
    """The stream's cap on records per batch per channel (None: none)."""
    scale_out_utilization: float | None = None
    """The sensor policy's P6 target (None: the policy's default)."""
    scale_in_utilization: float | None = None
    """The sensor policy's P2 target (None: the policy's default)."""
    admission_high_s: float | None = None
    """The stream's admission-control high watermark (seed 004), s; None: admission off."""


@dataclass
class ControlLog:
    """What the elastic driver did: one entry per tick, the decisions realized, the results."""

    ticks: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[Any] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------------------- the stream


def _start_stream(config: Path, spec, options: BenchOptions, log: Path) -> subprocess.Popen:
    return start_stream_process(
        config,
        log,
        *("--name", spec.name, "--topic", spec.input_topic, "--root", spec.root),
        *("--channels", str(options.initial_channels), "--trigger", str(spec.trigger_seconds)),
        *("--max-offsets", str(options.max_offsets), "--service-ms", str(options.service_ms)),
        *("--observe-every", "10"),
        *(("--max-records-per-channel", str(options.records_per_channel)) if options.records_per_channel else ()),
        *(("--admission-high", str(options.admission_high_s)) if options.admission_high_s else ()),
    )


def _wait_for_first_batch(spec, process: subprocess.Popen, timeout_s: float = 300) -> None:
    from pipelines.streams.metrics import read_recent

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the stream exited with {process.returncode}; see its log")
        if read_recent(spec.bootstrap_servers, spec.metrics_topic, limit=1, timeout_s=2):
            return
        time.sleep(2)
    raise RuntimeError("the stream finished no batch in time")


# ---------------------------------------------------------------------------- the elastic driver


def _control_loop(spec, policy, stop: threading.Event, started: float, log: ControlLog) -> None:
    """The sensor's tick every sample period, its decisions realized online, one at a time; a
    rescale that fails is recorded and the loop goes on (deciding again at its next tick)."""
    from orchestration.elasticity.collector import KafkaStreamSource
    from orchestration.elasticity.tick import decide_tick

    source = KafkaStreamSource.of_policy(spec, policy)
    cursor: str | None = None
    while not stop.wait(policy.sample_period_s):
        at = time.time() - started
        try:
            outcome = decide_tick(cursor, source.read(time.time()), policy, _online_rescale(spec, policy, log, at))
        except RESCALE_FAILURES as error:  # the loop kept its state: as the sensor would, go on
            log.ticks.append({"time_s": round(at, 2), "skip": f"the rescale failed: {error}", "rule": None})
            continue
        cursor = outcome.cursor
        rule = outcome.decision.rule if outcome.decision else None
        signals = outcome.decision.signals if outcome.decision else {}
        log.ticks.append({"time_s": round(at, 2), "skip": outcome.skip_reason, "rule": rule, "signals": signals})


RESCALE_FAILURES = (TimeoutError, RuntimeError, ValueError)
"""What an online rescale raises when it does not commit (a timeout, a refused or failed request)."""


def _online_rescale(spec, policy, log: ControlLog, at: float):
    """The benchmark's realizer hand-on: rescale the running stream online (the resizing asset's
    call), recording the decision and the result (or the failure, then raised to the loop)."""
    from orchestration.elasticity.realizer import rescale_online

    def rescale(decision, target) -> None:
        log.decisions.append(decision.model_copy(update={"time_s": at}))
        try:
            result = rescale_online(spec, target, f"{decision.reason} [{decision.rule}]", policy.rescale_timeout_s)
        except RESCALE_FAILURES as error:
            log.results.append({"time_s": round(at, 2), "status": "failed", "error": str(error)})
            raise
        log.results.append({"time_s": round(at, 2), **result.model_dump(mode="json", exclude={"layout"})})

    return rescale


def _load(spec_kwargs: dict[str, Any], bootstrap: KafkaConnection | str, on_progress=None):
    from pipelines.load import LoadSpec, run_load

    return run_load(LoadSpec(**spec_kwargs), bootstrap, on_progress=on_progress)


# ---------------------------------------------------------------------------- measured series


def per_second_series(metrics, start_s: float, seconds: int, initial_channels: int) -> tuple[np.ndarray, np.ndarray]:
    """(channels in effect, p99 probe latency in s) for each second after `start_s`.

    A second's latencies are those of the probes that came back in it plus the ages of the
    probes still out at its end (reconstructed from their send times), so a long batch shows up
    as rising latency while it runs, not only when it ends.
    """
    probes = [
        (m.wall_time - lat / 1000.0, m.wall_time) for m in metrics for c in m.per_channel for lat in c.probe_latency_ms
    ]
    sent = np.array([p[0] for p in probes]) if probes else np.zeros(0)
    back = np.array([p[1] for p in probes]) if probes else np.zeros(0)
    # The layout a batch ran under was in effect from the batch's start (the rescale happens at
    # the boundary before it), not from when its metrics arrived.
    starts = np.array([m.wall_time - m.batch_ms / 1000.0 for m in metrics])
    counts = np.array([m.channels for m in metrics])
    channels = np.full(seconds, float(initial_channels))
    p99 = np.zeros(seconds)
    for k in range(seconds):
        lo, hi = start_s + k, start_s + k + 1
        done = back[(back >= lo) & (back < hi)] - sent[(back >= lo) & (back < hi)]
        out = hi - sent[(sent <= hi) & (back >= hi)]
        values = np.concatenate([done, out])
        p99[k] = float(np.percentile(values, 99)) if values.size else (p99[k - 1] if k else 0.0)
        before = np.flatnonzero(starts < hi)
        if before.size:
            channels[k] = counts[before[-1]]
    return channels, p99


# ---------------------------------------------------------------------------- static reference


def _static_candidates(options: BenchOptions) -> list[int]:
    """From the count that would be exactly saturated at the peak, upwards."""
    saturated = max(1, math.ceil(options.peak_rps * options.service_ms / 1000.0))
    return list(range(min(saturated, options.max_channels), options.max_channels + 1))


def static_segment_seconds(options: BenchOptions, played: Trace) -> float:
    """How long a static segment holds the peak: the played trace's longest hold at its peak,
    and at least `--static-seconds`."""
    return max(options.static_seconds, played.longest_peak_hold_s)


def _static_segment(
    spec, options: BenchOptions, channels: int, seconds: int, bootstrap: KafkaConnection | str
) -> dict[str, Any]:
    """Rescale to `channels`, hold the peak `seconds`, and measure SLO attainment after a settling third."""
    from orchestration.elasticity.realizer import rescale_online
    from pipelines.streams.control import RescaleTarget
    from pipelines.streams.files import StreamFiles
    from pipelines.streams.metrics import read_recent

    current = StreamFiles(spec).committed_layout()
    if current is not None and current.n_channels != channels:
        rescale_online(spec, RescaleTarget(op="scale_to", channels=channels), "static reference", 600)
    started = time.time()
    _load(_load_kwargs(spec, options, profile="constant", duration_s=seconds), bootstrap)
    settle = int(seconds / 3)
    metrics = read_recent(bootstrap, spec.metrics_topic, limit=5000)
    _, p99 = per_second_series(metrics, started, seconds, channels)
    attainment = float(np.mean(p99[settle:] <= options.slo_s))
    return {
        "channels": channels,
        "seconds": seconds,
        "slo_attainment": attainment,
        "max_p99_s": float(p99[settle:].max()),
    }


def _load_kwargs(spec, options: BenchOptions, **overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "profile": options.trace,
        "peak_rate": options.peak_rps,
        "speed": options.speed,
        "esault_cycles": options.cycles,
        "topic": spec.input_topic,
        "words_per_line": 1,
        "vocabulary": 2000,
        "distribution": "uniform",
        "processes": 1,
    }
    kwargs.update(overrides)
    return kwargs


# ---------------------------------------------------------------------------- the command


def elasticity_command(
    json_path: Path = typer.Option(..., "--json", help="Where to write the figures (JSON)."),
    png_path: Path | None = typer.Option(
        None, "--png", help="Plot of input rate / channels / p99 (default: next to the JSON)."
    ),
    trace: str = typer.Option("esault", "--trace", help="Load profile: esault | square | step | sine."),
    peak: float = typer.Option(800.0, "--peak", min=1.0, help="Peak input rate, records/s (one word per record)."),
    speed: float = typer.Option(1.25, "--speed", min=0.1, help="Time compression of the trace."),
    cycles: int = typer.Option(1, "--cycles", min=1, help="eSault rise-hold-fall-hold cycles."),
    service_ms: float = typer.Option(4.0, "--service-ms", min=0.1, help="Per-record service time of the stage, ms."),
    slo: float = typer.Option(
        15.0,
        "--slo",
        min=0.1,
        help="Latency SLO on the p99 probe latency, s (a micro-batch costs seconds of fixed work).",
    ),
    interval: float = typer.Option(5.0, "--interval", min=1.0, help="Sampling period (sensor interval), seconds."),
    max_channels: int = typer.Option(
        8, "--max-channels", min=1, help="Most channels (= Spark task slots of the stream)."
    ),
    initial_channels: int = typer.Option(1, "--initial-channels", min=1, help="Channels at start."),
    static_seconds: float = typer.Option(
        45.0,
        "--static-seconds",
        min=10.0,
        help="Shortest static segment at the peak (a segment lasts as long as the trace's longest hold at its peak).",
    ),
    static_target: float = typer.Option(
        0.9, "--static-target", min=0.0, max=1.0, help="SLO attainment a static count must reach."
    ),
    max_offsets: int = typer.Option(10000, "--max-offsets", min=1, help="Cap on records per micro-batch."),
    records_per_channel: int = typer.Option(
        1500,
        "--records-per-channel",
        min=0,
        help="Cap on records per micro-batch per channel: a rescale lands at a batch boundary, and this bounds "
        "its wait for the batch in flight (0: no such cap).",
    ),
    repetitions: int = typer.Option(
        1, "--repetitions", min=1, help="Whole runs (each on a fresh stream); figures as medians with their spread."
    ),
    scale_out_utilization: float | None = typer.Option(
        None, min=0.05, max=1.0, help="The policy's scale-out utilization target (default: the policy's)."
    ),
    scale_in_utilization: float | None = typer.Option(
        None, min=0.05, max=1.0, help="The policy's scale-in utilization target (default: the policy's)."
    ),
    admission_high: float = typer.Option(
        0.0,
        "--admission-high",
        min=0.0,
        help="The stream's admission-control high watermark, s (seed 004: a rescale lands at a batch boundary, "
        "and admission keeps batches short under a backlog; 0: admission off).",
    ),
    config: ConfigOption = None,
) -> None:
    """Run the elastic loop on a real stream under a trace, then static references; JSON + PNG."""
    from orchestration.stack.project import load_settings

    options = BenchOptions(
        trace,
        peak,
        speed,
        cycles,
        service_ms,
        slo,
        interval,
        max_channels,
        initial_channels,
        static_seconds,
        static_target,
        max_offsets,
        records_per_channel or None,
        scale_out_utilization,
        scale_in_utilization,
        admission_high or None,
    )
    console = Console()
    runs = []
    with friendly_errors():  # e.g. no broker at the configured address: one line, not a trace
        settings = load_settings(config)
        with topics_deleted_after(settings.kafka.connection):
            for repetition in range(repetitions):
                console.rule(f"run {repetition + 1} of {repetitions}")
                runs.append(run_benchmark(settings, options, console))
    figures, run = _with_repetitions(runs)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(figures, indent=2, default=str))
    png = png_path or json_path.with_suffix(".png")
    from benchmarks.simulate_command import figures_table, write_plot

    write_plot(run, figures, png)
    table = figures_table(figures)
    table.title = f"Elastic stream on the {figures['trace']} trace (real Kafka + Spark, median run of {len(runs)})"
    console.print(table)
    if len(runs) > 1:
        console.print(repetitions_table(figures["repetitions"]))
    console.print(f"JSON: {json_path}   PNG: {png} (the median run)")


def _with_repetitions(runs: list[tuple[dict[str, Any], Any]]) -> tuple[dict[str, Any], Any]:
    """The median run's figures (and run, for the plot), with every run's summary, decisions and
    ticks (so a reversal or a late decision in any run can be traced to its phase, rule and
    readings) and each figure's median and spread under `repetitions`."""
    from benchmarks.control_figures import median_run_index, repeated_summary

    summaries = [figures["summary"] for figures, _ in runs]
    decisions = [figures["decisions"] for figures, _ in runs]
    ticks = [figures["ticks"] for figures, _ in runs]
    figures, run = runs[median_run_index(summaries)]
    figures = {
        **figures,
        "repetitions": repeated_summary(summaries),
        "run_summaries": summaries,
        "run_decisions": decisions,
        "run_ticks": ticks,
    }
    return figures, run


def repetitions_table(repeated: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="Over the repetitions")
    for column in ("figure", "median", "min", "max", "runs"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for name, values in repeated.items():
        table.add_row(
            name,
            f"{values['median']:.3f}",
            f"{values['min']:.3f}",
            f"{values['max']:.3f}",
            " / ".join(f"{v:.3f}" for v in values["runs"]),
        )
    return table


def bench_policy(options: BenchOptions) -> ElasticityPolicy:
    """The elasticity sensor's policy for the benchmark's stream: its SLO and period, and the longest
    wait a resize run may have for the stream (the run's own limit)."""

    targets = {
        name: value
        for name, value in (
            ("scale_out_utilization", options.scale_out_utilization),
            ("scale_in_utilization", options.scale_in_utilization),
        )
        if value is not None
    }
    return stream_policy(options.slo_s, options.interval_s, options.max_channels, **targets)


def stream_policy(slo_s: float, interval_s: float, max_channels: int, **targets: float) -> ElasticityPolicy:
    """A benchmark stream's sensor policy: its SLO and sampling period, probes timed out at three
    SLOs, and the longest wait a resize run may have for the stream (the run's own limit)."""
    from orchestration.elasticity.policy import ElasticityPolicy
    from orchestration.names import RESIZE_MAX_WAIT_S

    return ElasticityPolicy(
        slo_s=slo_s,
        sample_period_s=interval_s,
        probe_timeout_s=3 * slo_s,
        max_channels=max_channels,
        rescale_timeout_s=RESIZE_MAX_WAIT_S,
        **targets,
    )


def run_benchmark(settings, options: BenchOptions, console: Console):
    """The three phases (see the module docstring); returns (figures, measured run)."""
    from benchmarks.control_figures import StaticChoice, elasticity_figures
    from elasticity.control.simulation import SimulationRun, StageModelOptions
    from pipelines.kafka_topics import TopicSpec, ensure_topics
    from pipelines.load import LoadSpec
    from pipelines.load.profiles import rate_profile
    from pipelines.streams.metrics import read_recent
    from pipelines.streams.spec import StreamSpec

    tag = uuid.uuid4().hex[:6]
    folder = settings.run_dir / "bench" / f"elasticity-{tag}"
    folder.mkdir(parents=True, exist_ok=True)
    bootstrap = settings.kafka.connection
    spec = StreamSpec(
        name=f"bench_el_{tag}",
        input_topic=f"bench-elastic-{tag}",
        bootstrap_servers=settings.kafka.bootstrap_servers,
        kafka_security=settings.kafka.security,
        root=str(folder / "stream"),
        channels=options.initial_channels,
        service_ms_per_record=options.service_ms,
    )
    ensure_topics(bootstrap, [TopicSpec(name=spec.input_topic, partitions=4)])
    policy = bench_policy(options)
    profile = rate_profile(LoadSpec(**_load_kwargs(spec, options)))
    stream = _start_stream(
        stream_settings_file(settings, folder, options.max_channels), spec, options, folder / "stream.log"
    )
    log = ControlLog()
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            boot = progress.add_task("starting the stream (Spark)", total=None)
            _wait_for_first_batch(spec, stream)
            progress.update(boot, total=1, completed=1)
            elastic = progress.add_task(f"elastic phase ({options.trace})", total=int(profile.duration_s))
            stop = threading.Event()
            started = time.time()
            driver = threading.Thread(target=_control_loop, args=(spec, policy, stop, started, log), daemon=True)
            driver.start()
            report = _load(
                _load_kwargs(spec, options),
                bootstrap,
                on_progress=lambda p: progress.update(
                    elastic, completed=min(int(p.elapsed_s), int(profile.duration_s))
                ),
            )
            stop.set()
            driver.join(timeout=policy.rescale_timeout_s)
            metrics = read_recent(bootstrap, spec.metrics_topic, limit=20000)
            candidates = _static_candidates(options)
            segment_s = math.ceil(static_segment_seconds(options, profile.trace))
            static_task = progress.add_task("static segments at the peak", total=len(candidates))
            statics = []
            for channels in candidates:
                statics.append(_static_segment(spec, options, channels, segment_s, bootstrap))
                progress.update(static_task, advance=1)
                if statics[-1]["slo_attainment"] >= options.static_target:
                    break
    finally:
        stop_stream_process(stream)

    seconds = int(profile.duration_s)
    channels, p99 = per_second_series(metrics, started, seconds, options.initial_channels)
    sent = np.asarray(
        report.per_second_sent[:seconds] + [0] * max(0, seconds - len(report.per_second_sent)), dtype=float
    )
    run = SimulationRun(
        trace=profile.trace,
        tick_s=1.0,
        times_s=np.arange(seconds, dtype=float),
        input_rate_rps=sent,
        channels=channels,
        p99_latency_s=p99,
        max_latency_s=p99,
        lag_records=np.zeros(seconds),
        decisions=list(log.decisions),
        wall_time_s=time.time() - started,
    )
    best = next((s for s in statics if s["slo_attainment"] >= options.static_target), statics[-1])
    static = StaticChoice(
        best["channels"], best["slo_attainment"], best["slo_attainment"] >= options.static_target, len(statics)
    )
    figures = elasticity_figures(
        run,
        static,
        StageModelOptions(service_rate_rps=1000.0 / options.service_ms),
        policy.control_options(),
        options.slo_s,
    )
    figures.update(
        {
            "stack": "real Kafka broker + Spark stream (esp stream run) + elasticity sensor tick + online rescale",
            "options": options.__dict__,
            "policy": json.loads(policy.model_dump_json()),
            "static_segments": statics,
            "rescale_results": log.results,
            "ticks": log.ticks,
            "load": report.summary() | {"per_second_target": None},
            "stream_log": str(folder / "stream.log"),
        }
    )
    return figures, run
