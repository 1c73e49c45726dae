"""The batch side of each pipeline, as one table entry: how a day of bronze aggregates, and how
the stream's results turn into comparable per-day (or per-span) counts.

A built-in pipeline is one `BatchPipeline` in `BATCH_PIPELINES`; a user job's is made from its
`pipelines.api.Recompute` (`pipelines.batch.job_pipeline`).

What reconciliation compares, per pipeline:

- **wordcount** — streaming counts are running totals across days, so we compare increments.
  A batch's increment of a word is its count in that batch's results minus its count in the
  previous batch that reported it (the results table alone: what the stateful stage produced).
  The bronze folders say which days each batch's rows fell on. Days joined by a batch that
  straddles midnight form one *span*; normally a span is a single day. For a span, the sum of
  the stream's increments over its batches must equal the batch recomputation summed over its
  days, word by word. Any lost, duplicated or mis-migrated state shows up as a difference.
- **adclicks** — counts are per event-time window, and a window lies within one UTC day (the
  window length divides a day), so the span is the window's day: the latest count of each
  (campaign, window) plus the late views set aside for it must equal the batch recomputation.
- **user jobs** — every result row of the stream's latest view dated on a day (by the job's
  `Recompute.day_column`) must be a row of the job's batch recomputation of that day, and the
  other way round (see `pipelines.batch.job_pipeline`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from elasticity.state import Location
from pipelines.batch import tables
from pipelines.streams.names import daily_table_path
from pipelines.streams.spec import StreamSpec

SPAN = "span"
COUNT = "count"

SpanMap = Mapping[dt.date, str]


@dataclass(frozen=True)
class StreamSide:
    """The stream's counts per (span, key), and result batches no bronze folder accounts for."""

    counts: DataFrame
    unattributed_batches: list[int]


@dataclass(frozen=True)
class BatchPipeline:
    """Everything batch recomputation and validation need to know about one pipeline."""

    name: str
    key_columns: tuple[str, ...]
    """Identify a row of the results' latest view and of a daily partition."""
    bronze_schema: T.StructType | None
    """The bronze columns `aggregate` reads (used when a day has no data; None: the archive's)."""
    aggregate: Callable[[DataFrame, StreamSpec, dt.date], DataFrame]
    """The bronze rows `read_day` read for a day → key columns (+ extra columns) + `count`."""
    spans: Callable[[StreamSpec], dict[dt.date, str]]
    """Every archived day → the label of the span it is reconciled in."""
    stream_side: Callable[[SparkSession, StreamSpec, SpanMap], StreamSide]
    """The stream's counts for the given closed spans."""
    window_columns: tuple[str, str] | None = None
    """(start, end) timestamp columns of event-time windows, if results are windowed."""
    neighbour_days: int = 0
    """How many days before and after a day its recomputation reads too; a day is reconciled once
    that many following days have closed."""


def daily_table(spec: StreamSpec) -> str:
    """Where a stream's daily batch recomputation lives."""
    return daily_table_path(spec.folder)


# -- wordcount -------------------------------------------------------------------------------


def _wordcount_aggregate(bronze: DataFrame, spec: StreamSpec, day: dt.date) -> DataFrame:
    from pipelines.jobs.wordcount import word_deltas

    return word_deltas(bronze.select("line")).select("word", F.col("n").cast("long").alias(COUNT))


def _union_find_spans(groups: list[set[dt.date]]) -> dict[dt.date, str]:
    """Days linked by any shared group end in one span, labelled 'first..last' (or the day)."""
    parent: dict[dt.date, dt.date] = {}

    def root(day: dt.date) -> dt.date:
        parent.setdefault(day, day)
        while parent[day] != day:
            parent[day] = parent[parent[day]]
            day = parent[day]
        return day

    for group in groups:
        first, *rest = sorted(group)
        root(first)  # a one-day group is a span of its own
        for day in rest:
            parent[root(day)] = root(first)
    members: dict[dt.date, list[dt.date]] = {}
    for day in list(parent):
        members.setdefault(root(day), []).append(day)
    labels = {}
    for days in members.values():
        days.sort()
        label = days[0].isoformat() if len(days) == 1 else f"{days[0].isoformat()}..{days[-1].isoformat()}"
        labels.update({d: label for d in days})
    return labels


def _wordcount_spans(spec: StreamSpec) -> dict[dt.date, str]:
    return _union_find_spans(list(tables.batch_days(spec.bronze_table).values()))


def word_increments(spark: SparkSession, results_table: str) -> DataFrame:
    """(batch_id, word, n): how much each batch added to each word, from the results alone."""
    results = spark.read.parquet(results_table).select("word", COUNT, "batch_id")
    previous = F.lag(COUNT).over(Window.partitionBy("word").orderBy("batch_id"))
    return results.select("batch_id", "word", (F.col(COUNT) - F.coalesce(previous, F.lit(0))).alias("n"))


def _wordcount_stream_side(spark: SparkSession, spec: StreamSpec, spans: SpanMap) -> StreamSide:
    batch_span = {
        batch: spans[min(days)] for batch, days in tables.batch_days(spec.bronze_table).items() if min(days) in spans
    }
    all_archived = set(tables.batch_days(spec.bronze_table))
    schema = T.StructType([T.StructField("batch_id", T.LongType()), T.StructField(SPAN, T.StringType())])
    mapping = spark.createDataFrame([(int(b), s) for b, s in batch_span.items()], schema)
    increments = word_increments(spark, spec.results_table).where(F.col("n") != 0)
    result_batches = {r.batch_id for r in increments.select("batch_id").distinct().collect()}
    counts = increments.join(F.broadcast(mapping), "batch_id").groupBy(SPAN, "word").agg(F.sum("n").alias(COUNT))
    return StreamSide(counts, sorted(result_batches - all_archived))


WORDCOUNT = BatchPipeline(
    name="wordcount",
    key_columns=("word",),
    bronze_schema=T.StructType([T.StructField("line", T.StringType())]),
    aggregate=_wordcount_aggregate,
    spans=_wordcount_spans,
    stream_side=_wordcount_stream_side,
)


# -- adclicks --------------------------------------------------------------------------------


def _adclicks_aggregate(bronze: DataFrame, spec: StreamSpec, day: dt.date) -> DataFrame:
    from pipelines.jobs.adclicks import view_window_counts

    counts = view_window_counts(bronze, spec.window_seconds)
    return counts.select(
        "campaign_id",
        F.timestamp_millis("window_start_ms").alias("window_start"),
        F.timestamp_millis("window_end_ms").alias("window_end"),
        F.col("n").cast("long").alias(COUNT),
    )


def _adclicks_spans(spec: StreamSpec) -> dict[dt.date, str]:
    return {day: day.isoformat() for day in tables.bronze_days(spec.bronze_table)}


def _adclicks_stream_side(spark: SparkSession, spec: StreamSpec, spans: SpanMap) -> StreamSide:
    from pipelines.streams.results import latest_rows

    keys = ["campaign_id", "window_start"]
    latest = latest_rows(spark, spec.results_table, keys).select(*keys, F.col(COUNT).cast("long").alias(COUNT))
    late_folder = spec.late_table
    if any(name.startswith("batch_id=") for name in Location.of(late_folder).names()):
        late = spark.read.parquet(late_folder).select(
            "campaign_id",
            F.timestamp_millis("window_start_ms").alias("window_start"),
            F.col("n").cast("long").alias(COUNT),
        )
        latest = latest.unionByName(late)
    day = F.date_format("window_start", "yyyy-MM-dd")
    closed = [d.isoformat() for d in spans]
    counts = latest.where(day.isin(closed)).groupBy(day.alias(SPAN), *keys).agg(F.sum(COUNT).alias(COUNT))
    return StreamSide(counts, [])


ADCLICKS = BatchPipeline(
    name="adclicks",
    key_columns=("campaign_id", "window_start"),
    bronze_schema=T.StructType(
        [
            T.StructField("campaign_id", T.StringType()),
            T.StructField("event_type", T.StringType()),
            T.StructField("event_time", T.LongType()),
        ]
    ),
    aggregate=_adclicks_aggregate,
    spans=_adclicks_spans,
    stream_side=_adclicks_stream_side,
    window_columns=("window_start", "window_end"),
)


BATCH_PIPELINES: dict[str, BatchPipeline] = {p.name: p for p in (WORDCOUNT, ADCLICKS)}
