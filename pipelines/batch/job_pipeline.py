"""The batch side of a user job: its `pipelines.api.Recompute` as a `BatchPipeline`, so a user
stream gets the built-in pipelines' daily backfill and reconciliation unchanged.

Reconciliation compares counts per key; a user job's results are rows of any shape. Each result
row becomes one key, `(result key columns, row)`, where `row` is the JSON of the compared columns,
with count 1. A row missing on one side, present twice, or with a different value shows as a
key whose stream and batch counts differ, and the difference names the row.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.api import Job, JobError, Recompute
from pipelines.batch import tables
from pipelines.batch.pipelines import COUNT, SPAN, BatchPipeline, SpanMap, StreamSide
from pipelines.streams.results import latest_rows
from pipelines.streams.spec import StreamSpec

ROW = "row"
"""The compared columns of a result row, as JSON."""


def job_pipeline(name: str, job: Job) -> BatchPipeline:
    """The batch pipeline of stream `name`, which runs `job`; a JobError if it declares no recompute."""
    recompute = job.recompute
    if recompute is None:
        raise JobError(f"stream {name}'s job declares no recompute (pipelines.api.Recompute): it has no daily backfill")
    keys = tuple(job.result_key_columns)

    def aggregate(bronze: DataFrame, spec: StreamSpec, day: dt.date) -> DataFrame:
        return _as_counted_rows(recompute.results(bronze), recompute, keys, [day.isoformat()]).drop("date")

    def stream_side(spark: SparkSession, spec: StreamSpec, spans: SpanMap) -> StreamSide:
        latest = latest_rows(spark, spec.results_table, list(keys))
        counted = _as_counted_rows(latest, recompute, keys, [d.isoformat() for d in spans])
        return StreamSide(counted.withColumnRenamed("date", SPAN), [])

    return BatchPipeline(
        name=name,
        key_columns=(*keys, ROW),
        bronze_schema=None,
        aggregate=aggregate,
        spans=lambda spec: {day: day.isoformat() for day in tables.bronze_days(spec.bronze_table)},
        stream_side=stream_side,
        neighbour_days=1,
    )


def _result_day(recompute: Recompute) -> Column:
    return F.date_format(F.timestamp_millis(F.col(recompute.day_column).cast("long")), "yyyy-MM-dd")


def _as_counted_rows(results: DataFrame, recompute: Recompute, keys: tuple[str, ...], days: list[str]) -> DataFrame:
    """Result rows dated on `days` → (date, key columns, row, count 1)."""
    wanted = [*keys, recompute.day_column, *recompute.compared_columns]
    if missing := [c for c in wanted if c not in results.columns]:
        raise JobError(f"the result rows have no {missing} column(s) (the recompute's columns are {results.columns})")
    row = F.to_json(F.struct(*(F.col(c) for c in sorted({recompute.day_column, *recompute.compared_columns}))))
    day = _result_day(recompute)
    return results.where(day.isin(days)).select(
        day.alias("date"), *keys, row.alias(ROW), F.lit(1).cast("long").alias(COUNT)
    )
