"""Where one micro-batch's rows are written, besides the stage's channel state: the results, late,
rejected and bronze tables, and the results and dead-letter topics.

The tables are exactly once: each batch owns its `batch_id=<id>` folder (in the bronze table, its
`date=…/batch_id=<id>` partitions), replaced when Spark replays the batch. The topics are at-least-once:
a replayed batch publishes again, keyed so consumers can keep the last value.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from elasticity.state import uris
from pipelines import kafka_io
from pipelines.dead_letters import write_dead_letters
from pipelines.streams.jobs import JobLogic
from pipelines.streams.spec import StreamSpec


def _overwrite_batch(rows: DataFrame, table: str, batch_id: int) -> None:
    """Replace the batch's folder of `table`: a replay leaves its rows once, never twice."""
    rows.write.mode("overwrite").parquet(uris.spark_path(f"{table}/batch_id={batch_id}"))


def _keep_batch_rows(rows: DataFrame, table: str, batch_id: int) -> None:
    """Keep rows the batch set aside (late, rejected) in `table`, tagged with the batch id."""
    _overwrite_batch(rows.withColumn("batch_id", F.lit(batch_id)), table, batch_id)


@dataclass(frozen=True)
class BatchSinks:
    """One stream's writes of a batch's rows, each keyed by the batch id."""

    spec: StreamSpec
    logic: JobLogic

    def write_results(self, results: DataFrame, batch_id: int) -> None:
        """The stage's result rows (they carry their `batch_id` already: the job may shape them)."""
        _overwrite_batch(results, self.spec.results_table, batch_id)

    def publish_results(self, rows: DataFrame) -> None:
        kafka_io.write_batch(
            rows,
            self.spec.kafka,
            self.spec.results_topic,
            key=F.col(self.logic.result_key),
            value=F.to_json(F.struct(*[F.col(c) for c in rows.columns])),
        )

    def write_rejected(self, rejected: DataFrame, batch_id: int) -> None:
        """Rows the operator rejected (late events...) kept in the rejected table per batch, with their
        reason (overwritten on replay): never dropped silently."""
        _keep_batch_rows(rejected, self.spec.rejected_table, batch_id)

    def write_late(self, late: DataFrame | None, batch_id: int) -> int:
        """Late rows are kept (per batch, overwritten on replay) and counted, never dropped silently."""
        if late is None:
            return 0
        # Read twice (the count, then the write): cached so its rows are computed once.
        late = late.persist()
        try:
            total = late.agg(F.sum("n").alias("n")).first().n or 0
            _keep_batch_rows(late, self.spec.late_table, batch_id)
            return int(total)
        finally:
            late.unpersist()

    def archive(self, good: DataFrame, batch_id: int) -> None:
        bronze = self.logic.bronze(good).withColumn("batch_id", F.lit(batch_id))
        (
            bronze.write.mode("overwrite")
            # Only this batch's partitions are replaced: the others are earlier batches' archive.
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy("date", "batch_id")
            .parquet(uris.spark_path(self.spec.bronze_table))
        )

    def write_dead_letters(self, rejected: DataFrame, batch_id: int) -> None:
        """Records esp or the job's parser rejected, published to the dead-letter topic."""
        write_dead_letters(rejected, self.spec.kafka, self.spec.dead_letter_topic, batch_id)
