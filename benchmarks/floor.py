"""The micro-batch floor: what one Spark micro-batch of a small chunk costs on this machine for
queries that do less and less of the word count's work, side by side in one run.

Issue 22 asks for a rescale pause 20x shorter than Spark's offline repartition, and both
pauses contain one micro-batch of the chunk waiting at the rescale (`esp bench rescale`). This
benchmark measures how short such a batch can be here at all:

- **read**: the Kafka source, its rows written to Spark's `noop` sink (nothing else);
- **prepare**: the word count's stateless part: parse, split and pre-aggregate per word in the
  JVM, rows to the `noop` sink: what esp's elastic stage is handed;
- **native**: Spark's own stateful `groupBy().count()`, updated rows to Parquet;
- **esp**: the elastic word count with the native job's outputs (`NATIVE_OUTPUTS`).

Every query runs over its own topic with the same partitions and trigger, through
`foreachBatch` (as the native and elastic word counts do). `chunks` chunks of `chunk_lines`
lines are produced one at a time, each once the query committed the previous one and sat idle
for `idle_s`, so each chunk is one batch that starts on an idle query, as after a rescale.
A batch's time is its commit (the `commits/<id>` file) less its trigger's start, the
definition `esp bench rescale` uses for its normal batch, next to Spark's own breakdown of the
trigger (`durationMs`: latestOffset, queryPlanning, addBatch, walCommit, commitOffsets, ...).

With `state_keys`, the stateful systems (native, esp) first consume that many distinct words
and the chunks draw from them: a batch then runs against the state a rescale benchmark of that
size holds (its normal batch), and `warm_chunks` unmeasured chunks let every Python worker open
its channels' copies first.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from benchmarks.spark_runs import (
    NATIVE_OUTPUTS,
    STATE_LOAD_WORDS_PER_LINE,
    commit_times,
    covering_lines,
    key_word,
    last_commit,
    machine,
    new_topic,
    produce,
    trigger_start_s,
    wait_caught_up,
)
from pipelines import kafka_io
from pipelines.dead_letters import REJECT
from pipelines.jobs.wordcount import parse_lines, word_deltas

Step = Callable[[str], None]

PARTIAL_KINDS = ("read", "prepare")
"""The queries that do only part of the word count (`PartialWordCount`)."""

SYSTEMS = (*PARTIAL_KINDS, "native", "esp")


@dataclass(frozen=True)
class FloorOptions:
    """How the floor benchmark runs; every option has a default."""

    chunks: int = 12
    """Chunks produced per system, one batch each."""
    chunk_lines: int = 200
    """Lines of a chunk (as the chunk waiting at `esp bench rescale`'s rescale)."""
    keys: int = 10_000
    """Distinct words the chunks draw from."""
    words_per_line: int = 8
    """Words per line."""
    partitions: int = 4
    """Topic partitions = elastic channels = native state partitions."""
    trigger_seconds: float = 0.5
    """Micro-batch trigger interval of every query (as `esp bench rescale`)."""
    idle_s: float = 1.5
    """Seconds a query sits idle after a chunk's batch before the next chunk is produced."""
    state_keys: int = 0
    """Distinct words native and esp hold before their chunks, which then draw from them (0: the
    state is what the chunks add)."""
    warm_chunks: int = 1
    """Unmeasured chunks before the measured ones (the first batch of a query pays for its planning
    caches and Python workers; with large state, each worker's first open of a channel too)."""
    systems: tuple[str, ...] = SYSTEMS
    """The systems to run, in this order."""
    timeout_s: float = 1800.0
    """Upper bound for any single wait (loading 1e7 keys of state included)."""
    workdir: str = ".esp/bench/floor"
    """Folder for the queries' checkpoints, state and results."""


@dataclass
class PartialWordCount:
    """A Kafka query that does only part of the word count: `read` (the source's rows to the
    noop sink) or `prepare` (parse, split, pre-aggregate per word; rows to the noop sink)."""

    spark: SparkSession
    kind: str
    bootstrap: str
    topic: str
    checkpoint: str
    trigger_seconds: float
    max_offsets_per_trigger: int | None = None
    query: StreamingQuery | None = field(default=None, init=False)

    def start(self) -> StreamingQuery:
        if self.kind not in PARTIAL_KINDS:
            raise ValueError(f"unknown partial word count {self.kind!r}: choose among {', '.join(PARTIAL_KINDS)}")
        source = kafka_io.read_stream(self.spark, self.bootstrap, self.topic, self.max_offsets_per_trigger)
        self.query = (
            source.writeStream.queryName(f"bench-{self.kind}-{self.topic}")
            .foreachBatch(self._batch)
            .option("checkpointLocation", self.checkpoint)
            .trigger(processingTime=f"{self.trigger_seconds} seconds")
            .start()
        )
        return self.query

    def _batch(self, batch: DataFrame, batch_id: int) -> None:
        rows = batch if self.kind == "read" else word_deltas(parse_lines(batch).where(F.col(REJECT).isNull()))
        rows.write.format("noop").mode("overwrite").save()

    def stop(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()
        self.query = None


def chunk_lines(options: FloorOptions, salt: int) -> list[bytes]:
    """`chunk_lines` lines of `words_per_line` words over `keys` words (or the `state_keys` words of
    the state when more), different per salt."""
    words = max(options.keys, options.state_keys)
    return [
        " ".join(
            key_word((i * 7919 + j * 104729 + salt * 15485863) % words) for j in range(options.words_per_line)
        ).encode()
        for i in range(options.chunk_lines)
    ]


def systems_named(text: str) -> tuple[str, ...]:
    """ "esp,native" -> ("esp", "native"); an unknown name is refused, naming the known ones."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in SYSTEMS]
    if unknown or not names:
        raise ValueError(f"--systems takes a comma-separated list of {', '.join(SYSTEMS)}; got {text!r}")
    return names


def holds_state(system: str) -> bool:
    """Whether `system` keeps per-word state (the partial queries keep none)."""
    return system not in PARTIAL_KINDS


def chunk_batches(progresses: list[dict[str, Any]], commits: dict[int, float], after: int) -> list[dict[str, Any]]:
    """The batches above `after` that read input, each with its time (commit − trigger start)
    and Spark's breakdown of the trigger; batches with no progress or no commit are left out."""
    batches = []
    for progress in progresses:
        batch_id = progress["batchId"]
        if batch_id <= after or progress["numInputRows"] <= 0 or batch_id not in commits:
            continue
        batches.append(
            {
                "batch_id": batch_id,
                "rows": progress["numInputRows"],
                "batch_s": commits[batch_id] - trigger_start_s(progress),
                "duration_ms": dict(progress["durationMs"]),
            }
        )
    return batches


def summarize(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max of the batch times, and the median of each part of Spark's breakdown."""
    times = [b["batch_s"] for b in batches]
    parts = sorted({name for b in batches for name in b["duration_ms"]})
    return {
        "batches": len(batches),
        "median_s": statistics.median(times) if times else None,
        "min_s": min(times, default=None),
        "max_s": max(times, default=None),
        "median_duration_ms": {
            name: statistics.median(b["duration_ms"].get(name, 0) for b in batches) for name in parts
        },
    }


def _start(system: str, spark: SparkSession, bootstrap: str, topic: str, options: FloorOptions) -> tuple[Any, str]:
    """`system` started over `topic` (its runner has `.query` and `.stop()`) and its checkpoint."""
    from pipelines.native import NativeSpec, NativeWordCount
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec

    root = Path(options.workdir) / f"{system}-{topic}"
    if system in PARTIAL_KINDS:
        partial = PartialWordCount(spark, system, bootstrap, topic, str(root / "checkpoint"), options.trigger_seconds)
        partial.start()
        return partial, partial.checkpoint
    if system == "native":
        spec = NativeSpec(
            name=f"bench-floor-native-{topic}",
            input_topic=topic,
            bootstrap_servers=bootstrap,
            root=str(root),
            partitions=options.partitions,
            trigger_seconds=options.trigger_seconds,
        )
        native = NativeWordCount(spark, spec)
        native.start()
        return native, spec.checkpoint
    stream_spec = StreamSpec(
        name=f"bench-floor-esp-{topic}",
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(root),
        channels=options.partitions,
        trigger_seconds=options.trigger_seconds,
        **NATIVE_OUTPUTS,
    )
    stream = ElasticStream(spark, stream_spec)
    stream.start()
    return stream, stream.spec.checkpoint


def run_system(system: str, spark: SparkSession, bootstrap: str, options: FloorOptions, step: Step) -> dict[str, Any]:
    """One system's chunks: its state first (`state_keys`), then `warm_chunks` unmeasured chunks,
    then `chunks` measured ones."""
    topic = new_topic(bootstrap, f"bench-floor-{system}", options.partitions)
    loads_state = bool(options.state_keys) and holds_state(system)
    if loads_state:
        produce(bootstrap, topic, covering_lines(options.state_keys, STATE_LOAD_WORDS_PER_LINE))
    runner, checkpoint = _start(system, spark, bootstrap, topic, options)

    def alive() -> bool:
        return runner.query is not None and runner.query.isActive

    try:
        if loads_state:
            wait_caught_up(checkpoint, bootstrap, topic, options.timeout_s, alive)
            step(f"{system}: {options.state_keys:,} keys of state loaded")
        after = -1
        for salt in range(options.warm_chunks + options.chunks):
            produce(bootstrap, topic, chunk_lines(options, salt))
            wait_caught_up(checkpoint, bootstrap, topic, options.timeout_s, alive)
            time.sleep(options.idle_s)
            if salt == options.warm_chunks - 1:
                after = last_commit(checkpoint)
            step(f"{system}: chunk {salt + 1 - options.warm_chunks}/{options.chunks}")
        batches = chunk_batches(list(runner.query.recentProgress), commit_times(checkpoint), after)
    finally:
        runner.stop()
    return {"system": system, "topic": topic, **summarize(batches), "runs": batches}


def run_floor_benchmark(
    spark: SparkSession, bootstrap: str, options: FloorOptions, step: Step = lambda _: None
) -> dict[str, Any]:
    """Every system's chunks, one system after the other, and how their medians compare."""
    spark.conf.set("spark.sql.shuffle.partitions", str(options.partitions))
    systems = {system: run_system(system, spark, bootstrap, options, step) for system in options.systems}
    medians = {name: result["median_s"] for name, result in systems.items()}
    return {
        "benchmark": "floor",
        "options": dict(options.__dict__),
        "machine": machine(spark),
        "systems": systems,
        "median_batch_s": medians,
        "ratios_to_native": {
            name: (value / medians["native"]) if value and medians.get("native") else None
            for name, value in medians.items()
        },
    }
