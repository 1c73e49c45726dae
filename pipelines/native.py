"""The native-Spark word count as a stream the benchmarks can start, stop and rescale.

`NativeWordCount` runs `pipelines.jobs.wordcount.native_counts` (Spark's own stateful
`groupBy("word").count()` on the RocksDB state store provider) over a Kafka topic, in update
mode, and writes each micro-batch's updated counts to `<root>/tables/results/batch_id=<id>`
(overwritten per batch id, so a replayed batch is idempotent) — the same table shape the
elastic stream writes, read back by `pipelines.streams.results.latest_rows`; every
`compact_every_batches` batches the committed ones are folded into one folder
(`pipelines.streams.compaction`).

Its state partitioning is fixed by `spark.sql.shuffle.partitions` when the checkpoint is first
created. Changing it means: stop the query, `repartition_state` (Spark >= 4.2's offline
`StreamingCheckpointManager.repartition`, which rewrites all state), start it again — the
baseline the online elastic rescale is measured against.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from elasticity.state import Location, uris
from pipelines import kafka_io
from pipelines.jobs.wordcount import native_counts
from pipelines.settings import KafkaConnection
from pipelines.streams import compaction
from pipelines.streams.metrics import checkpoint_batch_ids
from pipelines.streams.names import checkpoint_path, results_table_path

NEWEST_WORD = compaction.newest_per_key(["word"])


@dataclass(frozen=True)
class NativeSpec:
    """One native word-count stream."""

    name: str
    input_topic: str
    bootstrap_servers: KafkaConnection | str
    root: str
    partitions: int = 4
    trigger_seconds: float = 1.0
    max_offsets_per_trigger: int | None = None
    compact_every_batches: int = 100
    """Fold the committed batches' result folders into one every N batches (0: never)."""

    @property
    def checkpoint(self) -> str:
        return checkpoint_path(self.root)

    @property
    def results_table(self) -> str:
        return results_table_path(self.root)


@dataclass
class NativeWordCount:
    """Start, stop and offline-repartition the native word count of one `NativeSpec`."""

    spark: SparkSession
    spec: NativeSpec
    query: StreamingQuery | None = field(default=None, init=False)

    def start(self) -> StreamingQuery:
        """Start (or resume from the checkpoint). A fresh checkpoint takes `spec.partitions`
        state partitions; an existing one keeps the count stored in it."""
        source = kafka_io.read_stream(
            self.spark, self.spec.bootstrap_servers, self.spec.input_topic, self.spec.max_offsets_per_trigger
        )
        counts = native_counts(source)
        # The query clones the session's conf when it starts, so the change is scoped to it.
        previous = self.spark.conf.get("spark.sql.shuffle.partitions")
        self.spark.conf.set("spark.sql.shuffle.partitions", str(self.spec.partitions))
        try:
            self.query = (
                counts.writeStream.queryName(self.spec.name)
                .outputMode("update")
                .foreachBatch(self._write_results)
                .option("checkpointLocation", uris.spark_path(self.spec.checkpoint))
                .trigger(processingTime=f"{self.spec.trigger_seconds} seconds")
                .start()
            )
        finally:
            self.spark.conf.set("spark.sql.shuffle.partitions", previous)
        return self.query

    def stop(self) -> None:
        """Stop now (a running batch is interrupted; its offsets stay logged, uncommitted)."""
        if self.query is not None and self.query.isActive:
            self.query.stop()
        self.query = None

    def stop_between_batches(self, timeout_s: float = 120.0) -> int:
        """Stop while no batch runs, so the checkpoint ends on a committed batch — what the
        offline repartition requires. `query.stop()` interrupts a running batch, so this waits
        for an idle moment (trigger not active), stops, and if a batch had started anyway,
        resumes the query and tries again. Returns how many attempts were needed."""
        deadline = time.monotonic() + timeout_s
        attempts = 0
        while True:
            attempts += 1
            self._wait_idle(deadline)
            self.stop()
            if last_logged_batch(self.spec.checkpoint) == last_committed_batch(self.spec.checkpoint):
                return attempts
            if time.monotonic() > deadline:
                raise TimeoutError("could not stop the native query between two batches")
            self.start()

    def _wait_idle(self, deadline: float) -> None:
        assert self.query is not None
        while time.monotonic() < deadline:
            status = self.query.status
            if not status["isTriggerActive"] and last_logged_batch(self.spec.checkpoint) == last_committed_batch(
                self.spec.checkpoint
            ):
                return
            time.sleep(0.005)

    def repartition_state(self, partitions: int) -> None:
        """Spark's offline state repartition of the (stopped) query's checkpoint."""
        if self.query is not None and self.query.isActive:
            raise RuntimeError("stop the native query before repartitioning its state")
        # Spark's only entry to the offline repartition is this private manager of the session.
        self.spark._streamingCheckpointManager.repartition(  # noqa: SLF001
            self.spec.checkpoint, partitions
        )

    def _write_results(self, batch: DataFrame, batch_id: int) -> None:
        rows = batch.select("word", "count", F.lit(batch_id).alias("batch_id"))
        every = self.spec.compact_every_batches
        # Compaction swaps folders with renameat2: on a local folder only, like the elastic stream's.
        if every and batch_id > 0 and batch_id % every == 0 and uris.is_local(self.spec.results_table):
            upto = min(last_committed_batch(self.spec.checkpoint), batch_id - 1)
            table = Path(uris.local_path(self.spec.results_table))
            compaction.compact(self.spark, table, NEWEST_WORD, upto, lambda _: None)
        rows.write.mode("overwrite").parquet(uris.spark_path(f"{self.spec.results_table}/batch_id={batch_id}"))


def last_logged_batch(checkpoint: str) -> int:
    """The newest batch whose offsets are logged (it may still be running)."""
    return (checkpoint_batch_ids(Location.of(checkpoint).child("offsets")) or [-1])[-1]


def last_committed_batch(checkpoint: str) -> int:
    return (checkpoint_batch_ids(Location.of(checkpoint).child("commits")) or [-1])[-1]


def state_partitions(checkpoint: str) -> int:
    """How many state partitions the checkpoint's aggregation has now (read from its state
    folder: one numbered directory per partition of operator 0)."""
    return len([name for name in Location.of(checkpoint).child("state", "0").names() if name.isdigit()])
