"""What the stream benchmarks share: key-covering input, a steady trickle of records, commit
times read from a query's checkpoint, catching up with a topic, the correctness check against
the batch oracle, and a description of the machine.

Commit times come from the checkpoint's `commits/<batch id>` files (their modification time
is when Spark marked the batch done), the same for the elastic and the native query, so both
systems' pauses are measured by one clock and one definition.
"""

from __future__ import annotations

import os
import platform
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines import kafka_io
from pipelines.dead_letters import REJECT
from pipelines.jobs.wordcount import parse_lines, word_deltas
from pipelines.kafka_topics import TopicSpec, end_offsets, ensure_topics
from pipelines.spark_session import local_fs_class
from pipelines.streams.metrics import checkpoint_offsets
from pipelines.streams.results import latest_rows

NATIVE_OUTPUTS = {"archive_input": False, "results_to_kafka": False}
"""StreamSpec fields that give the elastic stream the native baseline's outputs only (results
to Parquet): comparisons with Spark's own word count then measure the same work."""


def key_word(index: int) -> str:
    """The index-th benchmark key (short, ASCII, distinct)."""
    return f"k{index}"


STATE_LOAD_WORDS_PER_LINE = 100
"""Words per line of the input that loads a benchmark's state (`covering_lines`): long lines, so
1e7 keys load in 1e5 records."""


def covering_lines(keys: int, words_per_line: int, first: int = 0) -> list[bytes]:
    """Lines that together contain each of `keys` distinct words exactly once (so a stream that
    consumed them holds exactly `keys` keys of state), `words_per_line` words a line."""
    words = [key_word(i) for i in range(first, first + keys)]
    return [" ".join(words[i : i + words_per_line]).encode() for i in range(0, keys, words_per_line)]


def new_topic(bootstrap: str, prefix: str, partitions: int) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, [TopicSpec(name=name, partitions=partitions)])
    return name


def produce(bootstrap: str, topic: str, values: list[bytes], on_sent: Callable[[int], None] | None = None) -> None:
    """Send values round-robin over the topic's partitions and wait until all are acked."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20, max_request_size=8 << 20, acks=1
    )
    try:
        partitions = sorted(producer.partitions_for(topic))
        for i, value in enumerate(values):
            producer.send(topic, value=value, partition=partitions[i % len(partitions)])
            if on_sent is not None and (i + 1) % 1000 == 0:
                on_sent(1000)
        producer.flush()
        if on_sent is not None:
            on_sent(len(values) % 1000)
    finally:
        producer.close()


@dataclass
class Trickle:
    """A background producer of `rate` lines/s over keys [0, keys): keeps micro-batches coming
    so that "the first batch after a change" happens as soon as the system can run one."""

    bootstrap: str
    topic: str
    keys: int
    rate: float = 200.0
    words_per_line: int = 8
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Trickle:
        self._thread = threading.Thread(target=self._run, name="bench-trickle", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5, acks=1)
        period = 0.05
        per_tick = max(1, round(self.rate * period))
        try:
            while not self._stop.is_set():
                for _ in range(per_tick):
                    first = (self.sent * 7919) % self.keys
                    words = (key_word((first + j * 104729) % self.keys) for j in range(self.words_per_line))
                    producer.send(self.topic, value=" ".join(words).encode())
                    self.sent += 1
                producer.flush()
                self._stop.wait(period)
        finally:
            producer.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


def commit_times(checkpoint: str) -> dict[int, float]:
    """batch id -> when the query committed it (mtime of `commits/<id>`)."""
    folder = Path(checkpoint) / "commits"
    if not folder.is_dir():
        return {}
    return {int(p.name): p.stat().st_mtime for p in folder.iterdir() if p.name.isdigit()}


def trigger_start_s(progress: dict[str, Any]) -> float:
    """Wall time at which a query progress's trigger began (its `timestamp`)."""
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def wait_caught_up(
    checkpoint: str, bootstrap: str, topic: str, timeout_s: float, is_alive: Callable[[], bool] = lambda: True
) -> float:
    """Until the query committed the topic's end offsets as of now; returns when (wall time)."""
    target = end_offsets(bootstrap, topic)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive():
            raise RuntimeError("the query stopped before it caught up with the topic")
        done = checkpoint_offsets(checkpoint, topic)
        if all(done.get(p, -1) >= end for p, end in target.items()):
            return time.time()
        time.sleep(0.1)
    raise TimeoutError(f"the query did not catch up with {topic} within {timeout_s:.0f}s")


def wait_for_batches(
    checkpoint: str, after: int, count: int, timeout_s: float, is_alive: Callable[[], bool] = lambda: True
) -> None:
    """Until `count` batches with ids above `after` are committed."""
    deadline = time.monotonic() + timeout_s
    while sum(1 for b in commit_times(checkpoint) if b > after) < count:
        if not is_alive():
            raise RuntimeError("the query stopped")
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} batches after {after} within {timeout_s:.0f}s")
        time.sleep(0.1)


def last_commit(checkpoint: str) -> int:
    times = commit_times(checkpoint)
    return max(times) if times else -1


def median_gap_s(times: dict[int, float], batch_ids: list[int]) -> float | None:
    """Median time between consecutive commits among `batch_ids` (the normal batch cadence)."""
    gaps = sorted(times[b] - times[b - 1] for b in batch_ids if b - 1 in times and b in times)
    return gaps[len(gaps) // 2] if gaps else None


@dataclass(frozen=True)
class CorrectnessCheck:
    """A results table against the batch oracle of the whole topic."""

    expected_keys: int
    result_keys: int
    mismatched_keys: int

    @property
    def ok(self) -> bool:
        return self.mismatched_keys == 0 and self.expected_keys == self.result_keys

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "ok": self.ok}


def oracle_counts(raw: DataFrame) -> DataFrame:
    """(word, n) of everything in a Kafka batch read: the distributed form of `batch_oracle`."""
    return word_deltas(parse_lines(raw).where(F.col(REJECT).isNull()))


def check_results(spark: SparkSession, results_table: str, bootstrap: str, topic: str) -> CorrectnessCheck:
    """Compare the latest count of every word in the results table with the oracle, in Spark
    (a full outer join: 1e6 keys never pass through Python)."""
    expected = oracle_counts(kafka_io.read_batch(spark, bootstrap, topic)).select(
        F.col("word"), F.col("n").alias("expected")
    )
    got = latest_rows(spark, results_table, ["word"]).select(F.col("word"), F.col("count").alias("got"))
    joined = expected.join(got, "word", "full_outer")
    row = joined.agg(
        F.count("expected").alias("expected_keys"),
        F.count("got").alias("result_keys"),
        F.sum(F.when(~F.col("expected").eqNullSafe(F.col("got")), 1).otherwise(0)).alias("mismatched"),
    ).first()
    return CorrectnessCheck(int(row.expected_keys), int(row.result_keys), int(row.mismatched or 0))


def machine(spark: SparkSession | None = None) -> dict[str, Any]:
    """The machine and its load while the benchmark ran (it is shared: say so in results), and
    with `spark`, the master both systems ran on (local[*] or a cluster's URL) and the class that
    opened local files (esp's java.nio one, or Hadoop's: `spark.nio_local_fs`)."""
    load1, load5, load15 = os.getloadavg()
    where = {} if spark is None else {"spark_master": spark.sparkContext.master, "local_fs": local_fs_class(spark)}
    return where | {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "loadavg_1_5_15": [round(load1, 2), round(load5, 2), round(load15, 2)],
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
