"""Reconciliation: for each closed day (span), the stream's counts equal the batch
recomputation of the same day. See `pipelines.batch.pipelines` for what is compared and why."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipelines.batch import tables
from pipelines.batch.pipelines import COUNT, SPAN, BatchPipeline, daily_table
from pipelines.streams.spec import StreamSpec


@dataclass
class SpanResult:
    span: str
    days: list[str]
    keys: int = 0
    stream_total: int = 0
    batch_total: int = 0
    differing_keys: int = 0


@dataclass
class Reconciliation:
    """Per-span outcome, the first differences, and the days left out (with why)."""

    spans: list[SpanResult] = field(default_factory=list)
    differences: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    unattributed_batches: list[int] = field(default_factory=list)

    @property
    def differing_keys(self) -> int:
        return sum(s.differing_keys for s in self.spans)

    @property
    def passed(self) -> bool:
        return self.differing_keys == 0 and not self.unattributed_batches


def closed_spans(
    pipeline: BatchPipeline, spec: StreamSpec, today: dt.date
) -> tuple[dict[dt.date, str], dict[str, str]]:
    """(day → span for spans that can be reconciled, skipped day → reason).

    A span is closed when all its days, and the neighbour days its recomputation reads, are
    before `today` (UTC; no more records can land there) and every one of its days has a
    materialized daily partition.
    """
    spans = pipeline.spans(spec)
    members: dict[str, list[dt.date]] = {}
    for day, label in spans.items():
        members.setdefault(label, []).append(day)
    closed, skipped = {}, {}
    for label, days in members.items():
        if max(days) + dt.timedelta(days=pipeline.neighbour_days) >= today:
            skipped.update({d.isoformat(): "day not closed yet" for d in days})
        elif not all(tables.day_folder(daily_table(spec), d).is_dir() for d in days):
            skipped.update({d.isoformat(): "daily partition not materialized (run the backfill)" for d in days})
        else:
            closed.update({d: label for d in days})
    return closed, skipped


def _batch_side(spark: SparkSession, pipeline: BatchPipeline, spec: StreamSpec, spans: dict[dt.date, str]) -> DataFrame:
    daily = tables.read_days(spark, daily_table(spec), sorted(spans))
    schema = T.StructType([T.StructField("date", T.StringType()), T.StructField(SPAN, T.StringType())])
    mapping = spark.createDataFrame([(d.isoformat(), s) for d, s in spans.items()], schema)
    keys = list(pipeline.key_columns)
    daily = daily.withColumn("date", F.col("date").cast("string"))
    return daily.join(F.broadcast(mapping), "date").groupBy(SPAN, *keys).agg(F.sum(COUNT).alias(COUNT))


def reconcile(
    spark: SparkSession, pipeline: BatchPipeline, spec: StreamSpec, today: dt.date, max_differences: int = 50
) -> Reconciliation:
    """Compare stream and batch counts key by key for every closed span."""
    spans, skipped = closed_spans(pipeline, spec, today)
    outcome = Reconciliation(skipped=skipped)
    if not spans:
        return outcome
    keys = list(pipeline.key_columns)
    stream = pipeline.stream_side(spark, spec, spans)
    outcome.unattributed_batches = stream.unattributed_batches
    joined = (
        stream.counts.withColumnRenamed(COUNT, "stream_count")
        .join(
            _batch_side(spark, pipeline, spec, spans).withColumnRenamed(COUNT, "batch_count"),
            [SPAN, *keys],
            "full_outer",
        )
        .select(
            SPAN,
            *keys,
            F.coalesce("stream_count", F.lit(0)).alias("stream_count"),
            F.coalesce("batch_count", F.lit(0)).alias("batch_count"),
        )
        .withColumn("differs", F.col("stream_count") != F.col("batch_count"))
        .persist()
    )
    try:
        per_span = (
            joined.groupBy(SPAN)
            .agg(
                F.count(F.lit(1)).alias("keys"),
                F.sum("stream_count").alias("stream_total"),
                F.sum("batch_count").alias("batch_total"),
                F.sum(F.col("differs").cast("long")).alias("differing"),
            )
            .collect()
        )
        stats = {r[SPAN]: r for r in per_span}
        for label in sorted(set(spans.values())):
            row = stats.get(label)
            days = sorted(d.isoformat() for d, s in spans.items() if s == label)
            result = SpanResult(label, days)
            if row is not None:
                result.keys, result.stream_total, result.batch_total = (
                    row["keys"],
                    int(row["stream_total"]),
                    int(row["batch_total"]),
                )
                result.differing_keys = int(row["differing"])
            outcome.spans.append(result)
        diffs = joined.where("differs").orderBy(SPAN, *keys).limit(max_differences).collect()
        outcome.differences = [{k: _plain(r[k]) for k in (SPAN, *keys, "stream_count", "batch_count")} for r in diffs]
    finally:
        joined.unpersist()
    return outcome


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, (dt.date, dt.datetime)) else value
