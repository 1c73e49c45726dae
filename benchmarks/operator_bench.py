"""The operator benchmark: one user-defined stateful operator ("top-k pages per user") on esp
against the same logic on Spark's own arbitrary-stateful APIs, on one pre-loaded topic, same
partitions, same Spark session, several repetitions.

Systems (each reads the topic from the earliest offset into an empty checkpoint, writes each
batch's rows to Parquet under `<root>/tables/results/batch_id=<id>`, RocksDB state):

- **esp**: `benchmarks.operator_jobs:topk_pages_job` run by `ElasticStream` (channels = topic
  partitions; the bronze archive and the Kafka copy of the results off, `NATIVE_OUTPUTS`);
- **applyInPandasWithState**: `groupBy("user_id").applyInPandasWithState(...)`, update mode;
- **transformWithStateInPandas**: `groupBy("user_id").transformWithStateInPandas(...)` with a
  `ValueState`, update mode (Spark ≥ 4.0). It is tried first, in the warm-up; if it fails, its
  error is kept in the results (`unavailable`) and it is left out of the measured runs.

All three keep a user's page counts as one JSON string (esp: `JsonCodec`; Spark: a one-column
state row), fold a batch's views with a vectorized count, and format rows with the same
`top_pages_text`: the comparison is of the engines, not of three ways to model the state.

Measured per run as `benchmarks.throughput` does: records/s (wall) = records / (last commit −
start) and records/s (busy) = records / Σ triggerExecution of the batches with input. The order
of the systems rotates between repetitions; each system first runs once, unmeasured, over a
small warm-up topic. The first repetition of each system is checked: the newest row of every
user equals a plain-Python oracle over the records produced.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from benchmarks.operator_jobs import RECORD_SCHEMA, K, top_pages_text
from benchmarks.repeats import spread
from benchmarks.spark_runs import NATIVE_OUTPUTS, commit_times, machine, new_topic, produce, wait_caught_up
from elasticity.state import uris
from pipelines import kafka_io
from pipelines.streams.names import checkpoint_path, results_table_path
from pipelines.streams.results import latest_rows

Step = Callable[[str], None]

ESP = "esp"
APPLY = "applyInPandasWithState"
TRANSFORM = "transformWithStateInPandas"
JOB = "benchmarks.operator_jobs:topk_pages_job"
OUTPUT_DDL = "user_id STRING, top_pages STRING"
STATE_DDL = "counts STRING"
"""Spark's state row of one user: the page counts as JSON (what esp's `JsonCodec` stores)."""


@dataclass(frozen=True)
class OperatorOptions:
    """How the operator benchmark runs; every option has a default."""

    records: int = 1_000_000
    """Page views pre-loaded into the topic."""
    users: int = 20_000
    """Distinct users (the operator's keys)."""
    pages: int = 1_000
    """Distinct pages."""
    zipf_s: float = 1.0
    """Skew of users and pages: weight of the i-th is 1 / i^s (0: uniform)."""
    seed: int = 7
    """Seed of the load's random choices."""
    partitions: int = 4
    """Topic partitions = esp channels = Spark's state partitions (`spark.sql.shuffle.partitions`)."""
    repetitions: int = 3
    """Measured runs of each system over the whole topic."""
    max_offsets_per_trigger: int = 200_000
    """Records per micro-batch at most (every system)."""
    trigger_seconds: float = 0.5
    """Micro-batch trigger interval (every system)."""
    transform_with_state: bool = True
    """Also run transformWithStateInPandas (left out, with its error, if it fails)."""
    check: bool = True
    """Check the first repetition of each system against the oracle."""
    warmup_records: int = 50_000
    """Views of the warm-up topic each system runs over once before measuring (0: no warm-up)."""
    timeout_s: float = 1800.0
    """Upper bound for one run to catch up."""
    workdir: str = ".esp/bench/operator"
    """Folder for checkpoints, state and results."""


def systems_of(options: OperatorOptions) -> tuple[str, ...]:
    return (ESP, APPLY, TRANSFORM) if options.transform_with_state else (ESP, APPLY)


def step_count(options: OperatorOptions) -> int:
    """How many runs `run_operator_benchmark` reports through `step` (at most: a system that
    fails is skipped afterwards)."""
    return len(systems_of(options)) * (options.repetitions + (1 if options.warmup_records else 0))


# ---- the load and its oracle --------------------------------------------------------------------


def _zipf_cumulative(n: int, s: float) -> list[float]:
    return list(accumulate(1.0 / (i**s) for i in range(1, n + 1)))


def page_views(records: int, users: int, pages: int, zipf_s: float, seed: int) -> tuple[list[str], list[str]]:
    """(user of each view, page of each view): seeded, Zipf(s)-distributed over both."""
    rng = random.Random(seed)
    user_names = [f"u{i}" for i in range(users)]
    page_names = [f"p{i}" for i in range(pages)]
    who = rng.choices(user_names, cum_weights=_zipf_cumulative(users, zipf_s), k=records)
    what = rng.choices(page_names, cum_weights=_zipf_cumulative(pages, zipf_s), k=records)
    return who, what


def encode_views(users: Sequence[str], pages: Sequence[str]) -> list[bytes]:
    """The Kafka values of the views: `{"user_id": ..., "page": ...}` (the names need no escaping)."""
    return [f'{{"user_id":"{u}","page":"{p}"}}'.encode() for u, p in zip(users, pages)]


def oracle_top_pages(users: Sequence[str], pages: Sequence[str], k: int = K) -> dict[str, str]:
    """Each user's final top-k pages over all views, by plain counting (not the job's code)."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for user, page in zip(users, pages):
        counts[user][page] += 1
    return {
        user: ",".join(f"{page}:{n}" for page, n in sorted(c.items(), key=lambda item: (-item[1], item[0]))[:k])
        for user, c in counts.items()
    }


@dataclass(frozen=True)
class ViewTopic:
    """A pre-loaded topic and what its views must end up as."""

    topic: str
    records: int
    expected: dict[str, str] = field(repr=False)
    """user → final top pages (the oracle)."""


def preload_views(
    bootstrap: str,
    options: OperatorOptions,
    records: int | None = None,
    prefix: str = "bench-operator",
    on_progress: Callable[[int], None] | None = None,
) -> ViewTopic:
    """A fresh topic (`options.partitions` partitions) holding `records` (default
    `options.records`) seeded views, round-robin over partitions; `on_progress(n)` per n sent."""
    total = options.records if records is None else records
    users, pages = page_views(total, options.users, options.pages, options.zipf_s, options.seed)
    topic = new_topic(bootstrap, prefix, options.partitions)
    produce(bootstrap, topic, encode_views(users, pages), on_progress)
    return ViewTopic(topic, total, oracle_top_pages(users, pages))


# ---- Spark's versions of the operator -----------------------------------------------------------


def _fold(counts: dict[str, int], views: pd.DataFrame) -> None:
    for page, n in views["page"].value_counts(sort=False).items():
        counts[str(page)] = counts.get(str(page), 0) + int(n)


def top_pages_with_state(key: tuple[str], views: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """`applyInPandasWithState`'s function: one user's views of a batch → their top pages row."""
    counts: dict[str, int] = json.loads(state.get[0]) if state.exists else {}
    for chunk in views:
        _fold(counts, chunk)
    state.update((json.dumps(counts, separators=(",", ":")),))
    yield pd.DataFrame({"user_id": [key[0]], "top_pages": [top_pages_text(counts)]})


class TopPagesProcessor(StatefulProcessor):
    """`transformWithStateInPandas`'s processor: the same fold, the counts in one `ValueState`."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.counts = handle.getValueState("counts", STATE_DDL)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[pd.DataFrame]:
        stored = self.counts.get() if self.counts.exists() else None
        counts: dict[str, int] = json.loads(stored[0]) if stored is not None else {}
        for chunk in rows:
            _fold(counts, chunk)
        self.counts.update((json.dumps(counts, separators=(",", ":")),))
        yield pd.DataFrame({"user_id": [key[0]], "top_pages": [top_pages_text(counts)]})

    def close(self) -> None:
        pass


def views_stream(spark: SparkSession, bootstrap: str, topic: str, max_offsets: int) -> DataFrame:
    """(user_id, page) of the topic's parseable views: what esp's `parse_views` accepts."""
    source = kafka_io.read_stream(spark, bootstrap, topic, max_offsets)
    record = F.from_json(F.col("value").cast("string"), RECORD_SCHEMA).alias("r")
    return source.select(record).select("r.user_id", "r.page").where("user_id IS NOT NULL AND page IS NOT NULL")


def spark_top_pages(system: str, views: DataFrame) -> DataFrame:
    grouped = views.groupBy("user_id")
    if system == APPLY:
        return grouped.applyInPandasWithState(
            top_pages_with_state, OUTPUT_DDL, STATE_DDL, "update", GroupStateTimeout.NoTimeout
        )
    return grouped.transformWithStateInPandas(TopPagesProcessor(), OUTPUT_DDL, "Update", "None")


@dataclass
class SparkOperatorQuery:
    """One of Spark's versions as a query the benchmark starts and stops; each batch's rows go to
    `<root>/tables/results/batch_id=<id>` (overwritten per batch id, as the native word count's)."""

    spark: SparkSession
    system: str
    bootstrap: str
    topic: str
    root: str
    partitions: int
    trigger_seconds: float
    max_offsets: int
    query: StreamingQuery | None = None

    @property
    def checkpoint(self) -> str:
        return checkpoint_path(self.root)

    @property
    def results_table(self) -> str:
        return results_table_path(self.root)

    def start(self) -> None:
        rows = spark_top_pages(self.system, views_stream(self.spark, self.bootstrap, self.topic, self.max_offsets))
        # The query clones the session's conf when it starts: its state partitions are fixed here.
        previous = self.spark.conf.get("spark.sql.shuffle.partitions")
        self.spark.conf.set("spark.sql.shuffle.partitions", str(self.partitions))
        try:
            self.query = (
                rows.writeStream.queryName(f"bench-op-{self.system}")
                .outputMode("update")
                .foreachBatch(self._write)
                .option("checkpointLocation", uris.spark_path(self.checkpoint))
                .trigger(processingTime=f"{self.trigger_seconds} seconds")
                .start()
            )
        finally:
            self.spark.conf.set("spark.sql.shuffle.partitions", previous or str(self.partitions))

    def _write(self, batch: DataFrame, batch_id: int) -> None:
        # One action per batch: the stateful function runs (and updates state) once.
        rows = batch.select("user_id", "top_pages", F.lit(batch_id).alias("batch_id"))
        rows.write.mode("overwrite").parquet(uris.spark_path(f"{self.results_table}/batch_id={batch_id}"))

    def stop(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()


# ---- runs ---------------------------------------------------------------------------------------


def _busy_rate(query: StreamingQuery, records: int) -> float | None:
    busy_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress if p["numInputRows"] > 0)
    return records / (busy_ms / 1000) if busy_ms else None


def check_top_pages(spark: SparkSession, results_table: str, expected: dict[str, str]) -> dict[str, Any]:
    """The newest row of every user in a results table against the oracle."""
    got = {r.user_id: r.top_pages for r in latest_rows(spark, results_table, ["user_id"]).collect()}
    mismatched = sum(1 for user, top in expected.items() if got.get(user) != top)
    examples = [
        {"user_id": u, "expected": expected.get(u), "got": got.get(u)}
        for u in sorted(set(expected) | set(got))
        if expected.get(u) != got.get(u)
    ][:5]
    ok = mismatched == 0 and len(got) == len(expected)
    return {
        "expected_users": len(expected),
        "result_users": len(got),
        "mismatched_users": mismatched,
        "examples": examples,
        "ok": ok,
    }


def _run(
    system: str, spark: SparkSession, bootstrap: str, load: ViewTopic, options: OperatorOptions, rep: int, check: bool
) -> dict[str, Any]:
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec

    root = str(Path(options.workdir).resolve() / f"{system}-{rep}-{load.topic}")
    runner: Any
    started = time.time()  # building the runner (loading the job) counts, as in the throughput benchmark
    if system == ESP:
        spec = StreamSpec(
            name=f"bench-op-esp-{rep + 1}",
            job=JOB,
            input_topic=load.topic,
            bootstrap_servers=bootstrap,
            root=root,
            channels=options.partitions,
            trigger_seconds=options.trigger_seconds,
            max_offsets_per_trigger=options.max_offsets_per_trigger,
            **NATIVE_OUTPUTS,
        )
        runner = ElasticStream(spark, spec)
        checkpoint, results_table = spec.checkpoint, spec.results_table
    else:
        runner = SparkOperatorQuery(
            spark,
            system,
            bootstrap,
            load.topic,
            root,
            options.partitions,
            options.trigger_seconds,
            options.max_offsets_per_trigger,
        )
        checkpoint, results_table = runner.checkpoint, runner.results_table
    runner.start()
    try:

        def alive() -> bool:
            query = runner.query
            if query is not None and not query.isActive and query.exception() is not None:
                raise RuntimeError(f"{system} failed: {query.exception()}")
            return query is not None and query.isActive

        wait_caught_up(checkpoint, bootstrap, load.topic, options.timeout_s, alive)
        finished = max(commit_times(checkpoint).values())
        busy = _busy_rate(runner.query, load.records)
        batches = len(commit_times(checkpoint))
    finally:
        runner.stop()
    out: dict[str, Any] = {
        "system": system,
        "repetition": rep,
        "records": load.records,
        "wall_s": finished - started,
        "records_per_s": load.records / (finished - started),
        "busy_records_per_s": busy,
        "batches": batches,
    }
    if check:
        out["correctness"] = check_top_pages(spark, results_table, load.expected)
    return out


def _short(error: BaseException, limit: int = 2000) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= limit else text[:limit] + " …"


def run_operator_benchmark(
    spark: SparkSession,
    bootstrap: str,
    options: OperatorOptions,
    load: ViewTopic,
    step: Step = lambda _: None,
    warmup: ViewTopic | None = None,
) -> dict[str, Any]:
    """The warm-up, then every repetition of every system over `load`'s topic; runs, medians, ratios.

    Only transformWithStateInPandas may fail without failing the benchmark (it is the optional
    third system): its error is kept under `unavailable` and it is not run again."""
    spark.conf.set("spark.sql.shuffle.partitions", str(options.partitions))
    systems = list(systems_of(options))
    unavailable: dict[str, str] = {}

    def attempt(system: str, topic: ViewTopic, rep: int, check: bool) -> dict[str, Any] | None:
        try:
            return _run(system, spark, bootstrap, topic, options, rep, check)
        except Exception as error:
            if system != TRANSFORM:
                raise
            unavailable[system] = _short(error)
            systems.remove(system)
            return None

    if warmup is not None:
        for system in list(systems):
            attempt(system, warmup, -1, False)
            step(f"warm-up: {system} {'failed' if system in unavailable else 'done'}")
    runs: list[dict[str, Any]] = []
    for rep in range(options.repetitions):
        # Rotate the order so no system always runs right after the same one, or first.
        shift = rep % len(systems)
        for system in systems[shift:] + systems[:shift]:
            run = attempt(system, load, rep, options.check and rep == 0)
            if run is not None:
                runs.append(run)
            step(f"repetition {rep + 1}: {system} {'failed' if run is None else 'done'}")
    measured = [s for s in systems_of(options) if any(r["system"] == s for r in runs)]
    medians = {
        system: {
            "wall": spread([r["records_per_s"] for r in runs if r["system"] == system]),
            "busy": spread([r["busy_records_per_s"] for r in runs if r["system"] == system]),
        }
        for system in measured
    }
    return {
        "benchmark": "operator",
        "k": K,
        "options": asdict(options),
        "machine": machine(),
        "topic": load.topic,
        "systems": measured,
        "unavailable": unavailable,
        "medians": medians,
        "ratios": _ratios(medians),
        "correct": all(r["correctness"]["ok"] for r in runs if "correctness" in r),
        "runs": runs,
    }


def _ratios(medians: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, float | None]]:
    """esp / each Spark system (and transformWithState / applyInPandasWithState), wall and busy."""
    pairs = [(ESP, APPLY), (ESP, TRANSFORM), (TRANSFORM, APPLY)]
    out: dict[str, dict[str, float | None]] = {}
    for mine, theirs in pairs:
        if mine in medians and theirs in medians:
            out[f"{mine}/{theirs}"] = {
                figure: _divide(medians[mine][figure]["median"], medians[theirs][figure]["median"])
                for figure in ("wall", "busy")
            }
    return out


def _divide(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None
