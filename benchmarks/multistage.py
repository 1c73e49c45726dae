"""One policy's run of `esp bench multistage` on the real stack (see `multistage_command`).

A fresh stream of the two-stage job (`benchmarks.multistage_job`) in its own process, the load
generator playing a square trace (low, high, low, ...) into a fresh topic, and a driver thread
running the multi-stage loop (`stage_tick.decide_stages_tick`: one `StagesLoop` tick) every
sampling period with the chosen policy; its rescales are applied online, every stage of a tick at
the same batch boundary (requests to each stage's control folder, then waiting for each answer),
one rescale per stage at a time. Afterwards each stage's metrics give per-second channels, the
last stage's probes the end-to-end p99 latency, and `multistage_figures` the policy's figures.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.elasticity_command import RESCALE_FAILURES, per_second_series, stream_policy
from benchmarks.multistage_figures import StageRescaleAt, TickAt, policy_figures
from benchmarks.stream_process import start_stream_process, stop_stream_process, stream_settings_file

JOB = "benchmarks.multistage_job:two_stage_job"
FIRST, DOWNSTREAM = "main", "buckets"
VOCABULARY = 200_000
"""Words drawn uniformly from this many: far more than a batch holds, so stage main's selectivity ≈ 1."""


@dataclass(frozen=True)
class MultistageOptions:
    """One benchmark run's settings (from the command line)."""

    low_rps: float
    high_rps: float
    period_s: float
    duration_s: float
    main_ms: float
    downstream_ms: float
    slo_s: float
    interval_s: float
    max_channels: int
    max_offsets: int
    executors: int
    warmup_s: float


@dataclass
class PolicyLog:
    """What the driver saw and did: every tick and every realized rescale (seconds after the start)."""

    ticks: list[TickAt] = field(default_factory=list)
    rescales: list[StageRescaleAt] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PolicyRun:
    """One policy's measured series and figures."""

    policy: str
    target_rps: np.ndarray
    sent_rps: np.ndarray
    channels: dict[str, np.ndarray]
    p99_s: np.ndarray
    figures: dict[str, Any]


def bench_policy(options: MultistageOptions):
    """The sensor policy of the benchmark's stream: its SLO, period and channel bound."""
    return stream_policy(options.slo_s, options.interval_s, options.max_channels)


def stages_options(policy_name: str, options: MultistageOptions):
    from elasticity.control.asstream import AsStreamOptions, StagesOptions

    return StagesOptions(
        policy=policy_name,  # type: ignore[arg-type]
        asstream=AsStreamOptions(max_channels=options.max_channels, monitoring_period_s=30.0),
        executors=options.executors,
    )


def load_kwargs(topic: str, options: MultistageOptions) -> dict[str, Any]:
    return {
        "profile": "square",
        "peak_rate": options.high_rps,
        "base_rate": options.low_rps,
        "period_s": options.period_s,
        "duration_s": options.duration_s,
        "topic": topic,
        "words_per_line": 1,
        "vocabulary": VOCABULARY,
        "distribution": "uniform",
        "processes": 1,
    }


def _online(spec, policy, log: PolicyLog):
    """The hand-on: every stage's rescale of the tick requested at once, then each answer awaited
    (times in the log are wall-clock seconds)."""
    from orchestration.elasticity.realizer import rescale_online

    def apply(rescales: Sequence) -> None:
        at = time.time()

        def one(rescale) -> None:
            rescale_online(
                spec,
                rescale.target,
                f"{rescale.decision_reason} [{rescale.rule}]",
                policy.rescale_timeout_s,
                stage=rescale.stage,
            )

        with ThreadPoolExecutor(max_workers=len(rescales)) as pool:
            errors = [f.exception() for f in [pool.submit(one, r) for r in rescales]]
        for rescale, error in zip(rescales, errors):
            if error is None:
                log.rescales.append(
                    StageRescaleAt(at, rescale.stage, rescale.from_channels, rescale.to_channels, rescale.rule)
                )
                log.reasons.append(f"{rescale.stage}: {rescale.decision_reason}")
            else:
                log.failures.append(f"{rescale.stage}: {error}")
        if failed := [e for e in errors if e is not None]:
            raise failed[0]

    return apply


def _driver(spec, policy, stages, stop: threading.Event, log: PolicyLog) -> None:
    """The loop's tick every sampling period until `stop` (a failed rescale: the loop decides again)."""
    from orchestration.elasticity.collector import KafkaStreamSource
    from orchestration.elasticity.stage_tick import committed_epochs, decide_stages_tick
    from pipelines.streams.metrics import read_recent
    from pipelines.streams.names import stage_metrics_topic

    source = KafkaStreamSource(spec, policy.metrics_limit, stages.arrival_window_s)
    cursor: str | None = None
    while not stop.wait(policy.sample_period_s):
        reading = source.read(time.time())
        later = {DOWNSTREAM: read_recent(spec.kafka, stage_metrics_topic(spec.name, DOWNSTREAM), limit=120)}
        committed = committed_epochs(spec, (DOWNSTREAM,))
        try:
            outcome = decide_stages_tick(cursor, reading, later, policy, stages, _online(spec, policy, log), committed)
        except RESCALE_FAILURES:
            continue
        cursor = outcome.cursor
        if outcome.collected is not None:
            # At the reading's time: a rescale the tick decided is realized after it, and must count
            # as after the congestion it answered.
            log.ticks.append(TickAt(reading.now_s, outcome.congested))


def _stream_spec(settings, folder: Path, tag: str, options: MultistageOptions):
    from pipelines.streams.spec import StreamSpec

    return StreamSpec(
        name=f"bench_ms_{tag}",
        job=JOB,
        input_topic=f"bench-multistage-{tag}",
        bootstrap_servers=settings.kafka.bootstrap_servers,
        kafka_security=settings.kafka.security,
        root=str(folder / "stream"),
        channels=1,
        service_ms_per_record=options.main_ms,
        stage_service_ms_per_record={DOWNSTREAM: options.downstream_ms},
        max_offsets_per_trigger=options.max_offsets,
    )


def _start(settings, folder: Path, spec, options: MultistageOptions):
    config = stream_settings_file(settings, folder, options.max_channels)
    return start_stream_process(
        config,
        folder / "stream.log",
        *("--name", spec.name, "--job", JOB, "--topic", spec.input_topic, "--root", spec.root),
        *("--channels", "1", "--trigger", str(spec.trigger_seconds), "--max-offsets", str(options.max_offsets)),
        *("--service-ms", str(options.main_ms), "--stage-service-ms", f"{DOWNSTREAM}={options.downstream_ms}"),
        *("--observe-every", "10"),
    )


def run_policy(settings, policy_name: str, options: MultistageOptions, on_second=None) -> PolicyRun:
    """One fresh stream under the trace with `policy_name` deciding (see the module docstring)."""
    from benchmarks.elasticity_command import _load, _wait_for_first_batch
    from pipelines.kafka_topics import TopicSpec, ensure_topics
    from pipelines.load import LoadSpec
    from pipelines.load.profiles import rate_profile
    from pipelines.streams.metrics import read_recent
    from pipelines.streams.names import stage_metrics_topic

    tag = uuid.uuid4().hex[:6]
    folder = settings.run_dir / "bench" / f"multistage-{policy_name}-{tag}"
    folder.mkdir(parents=True, exist_ok=True)
    bootstrap = settings.kafka.connection
    spec = _stream_spec(settings, folder, tag, options)
    ensure_topics(bootstrap, [TopicSpec(name=spec.input_topic, partitions=4)])
    profile = rate_profile(LoadSpec(**load_kwargs(spec.input_topic, options)))
    policy = bench_policy(options)
    stages = stages_options(policy_name, options)
    log = PolicyLog()
    stream = _start(settings, folder, spec, options)
    try:
        _wait_for_first_batch(spec, stream)
        stop = threading.Event()
        driver = threading.Thread(target=_driver, args=(spec, policy, stages, stop, log), daemon=True)
        driver.start()
        # The stream's first batches are slow (JIT, caches): the loop runs, the figures do not count it.
        warmup = load_kwargs(spec.input_topic, options) | {"profile": "constant", "duration_s": options.warmup_s}
        warmup["peak_rate"] = options.low_rps
        _load(warmup, bootstrap)
        started = time.time()
        report = _load(load_kwargs(spec.input_topic, options), bootstrap, on_progress=on_second)
        stop.set()
        driver.join(timeout=policy.rescale_timeout_s)
        metrics = {
            stage: read_recent(bootstrap, stage_metrics_topic(spec.name, stage), limit=20000)
            for stage in (FIRST, DOWNSTREAM)
        }
    finally:
        stop_stream_process(stream)
    seconds = int(profile.duration_s)
    channels, p99 = {}, np.zeros(seconds)
    for stage, records in metrics.items():
        channels[stage], stage_p99 = per_second_series(records, started, seconds, 1)
        p99 = np.maximum(p99, stage_p99)  # the last stage's probes pass every stage; the max is the end-to-end view
    target = profile.per_second_targets()[:seconds]
    sent = np.asarray(report.per_second_sent[:seconds] + [0] * max(0, seconds - len(report.per_second_sent)), float)
    rescales = [replace(r, time_s=r.time_s - started) for r in log.rescales if r.time_s >= started]
    ticks = [replace(t, time_s=t.time_s - started) for t in log.ticks if t.time_s >= started]
    figures = policy_figures(target, channels, p99, options.slo_s, rescales, ticks, DOWNSTREAM)
    figures.update(
        {
            "policy": policy_name,
            "rescales": [r.__dict__ for r in rescales],
            "warmup_rescales": sum(1 for r in log.rescales if r.time_s < started),
            "reasons": log.reasons,
            "failed_rescales": log.failures,
            "ticks": len(log.ticks),
            "congested_ticks_s": [round(t.time_s, 1) for t in ticks if t.congested],
            "stream_log": str(folder / "stream.log"),
            "load": report.summary(),
        }
    )
    return PolicyRun(policy_name, target, sent, channels, p99, figures)
