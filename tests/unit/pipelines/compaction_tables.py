"""A stream's results, late and bronze folders written as the stream writes them, and every
reader's answer over them (compaction tests compare these before and after)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from orchestration.quality.state_check import results_state
from orchestration.quality.suites import latest_view
from pipelines.batch import tables
from pipelines.batch.pipelines import WORDCOUNT, word_increments
from pipelines.streams.results import latest_rows
from pipelines.streams.spec import StreamSpec

RESULTS = T.StructType(
    [
        T.StructField("word", T.StringType()),
        T.StructField("count", T.LongType()),
        T.StructField("channel", T.IntegerType()),
        T.StructField("batch_id", T.IntegerType()),
    ]
)
LATE = T.StructType(
    [
        T.StructField("campaign_id", T.StringType()),
        T.StructField("window_start_ms", T.LongType()),
        T.StructField("window_end_ms", T.LongType()),
        T.StructField("n", T.LongType()),
        T.StructField("batch_id", T.IntegerType()),
    ]
)
DAY = dt.date(2026, 11, 20)
ARROW_TYPES = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32()}


def day_of_batch(batch: int) -> dt.date | None:
    """Batches 0-9 on DAY, 10-19 on the next day, 20+ the day after; every 4th batch had no input."""
    return None if batch % 4 == 3 else DAY + dt.timedelta(days=min(batch // 10, 2))


def _write(schema: T.StructType, rows: list[tuple], folder: str) -> None:
    """One batch folder as Spark writes it (a part file and _SUCCESS); pyarrow, for speed."""
    arrow = pa.schema([(f.name, ARROW_TYPES[f.dataType.simpleString()]) for f in schema.fields])
    Path(folder).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(zip(arrow.names, r)) for r in rows], arrow), f"{folder}/part-0.parquet")
    (Path(folder) / "_SUCCESS").write_text("")


def write_stream_tables(spark: SparkSession, spec: StreamSpec, batches: range) -> None:
    """Per-batch results (cumulative counts of a few words), late rows and bronze folders."""
    counts: dict[str, int] = {}
    for b in batches:
        rows = {}
        if day_of_batch(b) is not None:
            for word in (f"w{b % 5}", f"w{(b * 3) % 7}", "common"):
                counts[word] = counts.get(word, 0) + b + 1
                rows[word] = (word, counts[word], b % 3, b)
            day = day_of_batch(b)
            (Path(spec.bronze_table) / f"date={day}" / f"batch_id={b}").mkdir(parents=True, exist_ok=True)
        _write(RESULTS, list(rows.values()), f"{spec.results_table}/batch_id={b}")
        late = [(f"c{b % 2}", 10_000 * (b % 3), 10_000 * (b % 3) + 10_000, b + 1, b)] if b % 2 else []
        _write(LATE, late, f"{spec.late_table}/batch_id={b}")


def answers(spark: SparkSession, spec: StreamSpec) -> dict[str, object]:
    """What every reader of the tables answers."""
    results = spec.results_table
    # The daily reconcile attributes each batch's increments to the batch's first bronze day.
    first_day = tables.first_day_of(spec.bronze_table)
    per_day: dict[tuple[str, str], int] = {}
    for r in word_increments(spark, results).where(F.col("n") != 0).collect():
        key = (str(first_day(r.batch_id)), r.word)
        per_day[key] = per_day.get(key, 0) + r.n
    hive = ds.dataset(results, partitioning="hive").to_table(columns=["word", "count", "batch_id"]).to_pylist()
    newest_batch = {r["word"]: max(x["batch_id"] for x in hive if x["word"] == r["word"]) for r in hive}
    return {
        "latest_rows": sorted((r.word, r["count"]) for r in latest_rows(spark, results, ["word"]).collect()),
        "latest_view": sorted((r.word, r["count"]) for r in latest_view(spark, results, ["word"]).collect()),
        "increments_per_day": per_day,
        "state_baseline": sorted(map(tuple, results_state(WORDCOUNT, results, 10**6).to_numpy().tolist())),
        "pyarrow_newest": sorted({(r["word"], r["count"]) for r in hive if r["batch_id"] == newest_batch[r["word"]]}),
        "late_sums": sorted(
            (r.campaign_id, r.window_start_ms, r.n)
            for r in spark.read.parquet(spec.late_table)
            .groupBy("campaign_id", "window_start_ms")
            .agg(F.sum("n").alias("n"))
            .collect()
        ),
    }
