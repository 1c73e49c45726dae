"""Recompute one day of a pipeline from its bronze archive into the daily table."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pyspark.sql import SparkSession

from pipelines.batch import tables
from pipelines.batch.pipelines import BatchPipeline, daily_table
from pipelines.streams.spec import StreamSpec


@dataclass(frozen=True)
class DayResult:
    """What recomputing one day did."""

    day: dt.date
    bronze_batches: int
    bronze_rows: int
    rows_written: int
    total_count: int
    table: str


def recompute_day(spark: SparkSession, pipeline: BatchPipeline, spec: StreamSpec, day: dt.date) -> DayResult:
    """Aggregate `day`'s bronze rows (and its neighbours', if the pipeline reads them) and replace
    that day's partition (idempotent).

    A day without bronze data gets an empty partition: a quiet day is a fact, and an empty
    partition lets reconciliation and schedules treat it like any other day.
    """
    days = [day + dt.timedelta(days=n) for n in range(-pipeline.neighbour_days, pipeline.neighbour_days + 1)]
    bronze = tables.read_bronze_days(spark, spec.bronze_table, days, pipeline.bronze_schema).persist()
    try:
        aggregate = pipeline.aggregate(bronze, spec, day).persist()
        try:
            total = aggregate.agg({"count": "sum"}).first()[0] or 0
            rows = tables.replace_day(aggregate, daily_table(spec), day)
        finally:
            aggregate.unpersist()
        bronze_rows = bronze.count()
    finally:
        bronze.unpersist()
    batches = len(tables.bronze_batches(spec.bronze_table, day))
    return DayResult(day, batches, bronze_rows, rows, int(total), daily_table(spec))
