"""The throughput benchmark: the elastic word count against Spark's native stateful word count
on one pre-loaded topic, same partitions, same Spark session, several repetitions.

The topic is filled once (`pipelines.load.preload`, seeded: the exact counts are known). Each
repetition runs both systems from an empty checkpoint over the whole topic (the order
alternates between repetitions, so neither always gets the warmer JVM), and measures:

- **records/s (wall)**: records / (last batch committed − query started): what a user waits
  for, start-up included;
- **records/s (busy)**: records / Σ batch trigger durations from the query's progress (the
  processing rate without start-up and idle triggers).

The elastic stream's channels equal the topic's partitions and the native query's state
partitions (`spark.sql.shuffle.partitions`), and both read at most `max_offsets_per_trigger`
records a batch. The first repetition of each system is checked against the batch oracle.

Three systems run, so that like is compared with like and the cost of the rest is shown too:

- **esp**: the elastic word count with the native job's outputs (results to Parquet only; the
  bronze archive and the Kafka copy of the results off). `ratio` is esp / native;
- **native**: `groupBy().count()` with Spark's own state store, updated rows to Parquet;
- **esp-full** (`full_pipeline`): the elastic word count as `esp stream run` deploys it, with
  the bronze archive and the results topic; `full_ratio` is esp-full / native.

With `profile`, two queries that do only part of the work run beside them
(`benchmarks.floor.PartialWordCount`): **read** (the Kafka source alone) and **prepare** (parse,
split and pre-aggregate per word, the part esp does in the JVM before its stage). esp does all of
prepare's work and more, so prepare / native bounds what any esp stage can reach against native.

Before the measured runs each system runs once over a small warm-up topic, unmeasured: the
first query of a Spark session pays for JIT compilation and, for esp, the Python workers.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from benchmarks.floor import PARTIAL_KINDS, PartialWordCount
from benchmarks.spark_runs import NATIVE_OUTPUTS, check_results, commit_times, machine, new_topic, wait_caught_up
from pipelines.native import NativeSpec, NativeWordCount

Step = Callable[[str], None]


@dataclass(frozen=True)
class ThroughputOptions:
    """How the throughput benchmark runs; every option has a default."""

    records: int = 2_000_000
    """Lines pre-loaded into the topic."""
    partitions: int = 4
    """Topic partitions = elastic channels = native state partitions."""
    repetitions: int = 3
    """Runs of each system over the whole topic."""
    max_offsets_per_trigger: int = 500_000
    """Records per micro-batch at most (both systems)."""
    trigger_seconds: float = 0.5
    """Micro-batch trigger interval (both systems)."""
    vocabulary: int = 10_000
    """Distinct words of the load."""
    words_per_line: int = 8
    """Words per line."""
    producer_processes: int = 2
    """Processes of the pre-load."""
    check: bool = True
    """Check the first repetition of each system against the batch oracle."""
    full_pipeline: bool = True
    """Also run esp-full: the elastic job with its bronze archive and results topic."""
    profile: bool = False
    """Also run the partial queries `read` and `prepare` (the bound on esp / native)."""
    warmup_records: int = 100_000
    """Lines of the warm-up topic each system runs over once before measuring (0: no warm-up)."""
    timeout_s: float = 1800.0
    """Upper bound for one run to catch up."""
    workdir: str = ".esp/bench/throughput"
    """Folder for checkpoints, state and results."""


ESP_SYSTEMS = ("esp", "esp-full")


def systems_of(options: ThroughputOptions) -> tuple[str, ...]:
    systems = ("esp", "native", "esp-full") if options.full_pipeline else ("esp", "native")
    return (*systems, *PARTIAL_KINDS) if options.profile else systems


def step_count(options: ThroughputOptions) -> int:
    """How many runs `run_throughput_benchmark` reports through `step`, given a warm-up topic
    whenever `warmup_records` is set."""
    return len(systems_of(options)) * (options.repetitions + (1 if options.warmup_records else 0))


def preload_topic(
    bootstrap: str,
    options: ThroughputOptions,
    on_progress: Callable[[int, int], None] | None = None,
    records: int | None = None,
    prefix: str = "bench-throughput",
) -> str:
    """A fresh topic holding `records` (default `options.records`) seeded word lines."""
    from pipelines.load import LoadSpec, preload

    topic = new_topic(bootstrap, prefix, options.partitions)
    spec = LoadSpec(
        topic=topic,
        vocabulary=options.vocabulary,
        words_per_line=options.words_per_line,
        processes=options.producer_processes,
    )
    total = options.records if records is None else records
    report = preload(
        spec, bootstrap, total, None if on_progress is None else lambda p: on_progress(p.sent, p.target_total)
    )
    if report.summary().get("errors"):
        raise RuntimeError(f"the pre-load had errors: {report.summary()}")
    return topic


def _busy_rate(query, records: int) -> float | None:
    busy_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress if p["numInputRows"] > 0)
    return records / (busy_ms / 1000) if busy_ms else None


def _run(
    system: str,
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    options: ThroughputOptions,
    rep: int,
    check: bool,
    records: int | None = None,
) -> dict[str, Any]:
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec

    records = options.records if records is None else records
    root = Path(options.workdir) / f"{system}-{rep}-{topic}"
    started = time.time()
    if system in ESP_SYSTEMS:
        spec = StreamSpec(
            name=f"bench-tp-{system}-{rep}",
            input_topic=topic,
            bootstrap_servers=bootstrap,
            root=str(root),
            channels=options.partitions,
            trigger_seconds=options.trigger_seconds,
            max_offsets_per_trigger=options.max_offsets_per_trigger,
            **({} if system == "esp-full" else NATIVE_OUTPUTS),
        )
        runner: Any = ElasticStream(spark, spec)
        runner.start()
        checkpoint, results_table = runner.spec.checkpoint, runner.spec.results_table
    elif system in PARTIAL_KINDS:
        checkpoint, results_table = str(root / "checkpoint"), None
        runner = PartialWordCount(
            spark, system, bootstrap, topic, checkpoint, options.trigger_seconds, options.max_offsets_per_trigger
        )
        runner.start()
    else:
        spec = NativeSpec(
            name=f"bench-native-tp-{rep}",
            input_topic=topic,
            bootstrap_servers=bootstrap,
            root=str(root),
            partitions=options.partitions,
            trigger_seconds=options.trigger_seconds,
            max_offsets_per_trigger=options.max_offsets_per_trigger,
        )
        runner = NativeWordCount(spark, spec)
        runner.start()
        checkpoint, results_table = spec.checkpoint, spec.results_table
    try:
        wait_caught_up(
            checkpoint, bootstrap, topic, options.timeout_s, lambda: runner.query is not None and runner.query.isActive
        )
        finished = max(commit_times(checkpoint).values())
        busy = _busy_rate(runner.query, records)
        batches = len(commit_times(checkpoint))
    finally:
        runner.stop()
    out = {
        "system": system,
        "repetition": rep,
        "wall_s": finished - started,
        "records_per_s": records / (finished - started),
        "busy_records_per_s": busy,
        "batches": batches,
    }
    if check and results_table is not None:
        out["correctness"] = check_results(spark, results_table, bootstrap, topic).to_dict()
    return out


def run_throughput_benchmark(
    spark: SparkSession,
    bootstrap: str,
    options: ThroughputOptions,
    topic: str,
    step: Step = lambda _: None,
    warmup_topic: str | None = None,
) -> dict[str, Any]:
    """The warm-up, then every repetition of every system over `topic` (pre-loaded); runs and medians."""
    spark.conf.set("spark.sql.shuffle.partitions", str(options.partitions))
    systems = systems_of(options)
    if warmup_topic is not None:
        for system in systems:
            _run(system, spark, bootstrap, warmup_topic, options, -1, False, options.warmup_records)
            step(f"warm-up: {system} done")
    runs = []
    for rep in range(options.repetitions):
        # Rotate the order so no system always runs right after the same one.
        order = systems[rep % len(systems) :] + systems[: rep % len(systems)]
        for system in order:
            runs.append(_run(system, spark, bootstrap, topic, options, rep, options.check and rep == 0))
            step(f"repetition {rep + 1}: {system} done")
    median = {system: _medians(runs, system) for system in systems}
    native = median["native"]
    out = {
        "benchmark": "throughput",
        "options": dict(options.__dict__),
        "machine": machine(spark),
        "topic": topic,
        "elastic_records_per_s": median["esp"]["wall"],
        "native_records_per_s": native["wall"],
        "ratio": median["esp"]["wall"] / native["wall"],
        "elastic_busy_records_per_s": median["esp"]["busy"],
        "native_busy_records_per_s": native["busy"],
        "busy_ratio": median["esp"]["busy"] / native["busy"] if native["busy"] else None,
        "correct": all(r["correctness"]["ok"] for r in runs if "correctness" in r),
        "runs": runs,
    }
    for partial in PARTIAL_KINDS:
        if partial in median:
            out[f"{partial}_records_per_s"] = median[partial]["wall"]
            out[f"{partial}_ratio"] = median[partial]["wall"] / native["wall"]
    if "esp-full" in median:
        out["elastic_full_records_per_s"] = median["esp-full"]["wall"]
        out["full_ratio"] = median["esp-full"]["wall"] / native["wall"]
    return out


def _medians(runs: list[dict[str, Any]], system: str) -> dict[str, float]:
    mine = [r for r in runs if r["system"] == system]
    return {
        "wall": statistics.median(r["records_per_s"] for r in mine),
        "busy": statistics.median(r["busy_records_per_s"] or 0 for r in mine),
    }
