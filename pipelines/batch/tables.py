"""The bronze archive and the daily tables as folders: which days exist, reading one day,
replacing one day.

Bronze is laid out `<bronze>/date=YYYY-MM-DD/batch_id=<b>/*.parquet` (the stream overwrites a
batch's folders on replay); a daily table is `<daily>/date=YYYY-MM-DD/*.parquet`, one folder per
partition so that re-running a day replaces exactly that folder.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

DATE_FORMAT = "%Y-%m-%d"
EXPIRED_PREFIX = ".expired-"


def parse_day(text: str) -> dt.date:
    """A YYYY-MM-DD day, or ValueError with a sentence saying what was expected."""
    try:
        return dt.datetime.strptime(text, DATE_FORMAT).date()
    except ValueError:
        raise ValueError(f"{text!r} is not a date in YYYY-MM-DD form") from None


def day_folder(table: str, day: dt.date) -> Path:
    return Path(table) / f"date={day.isoformat()}"


def _partition_values(folder: Path, name: str) -> list[str]:
    prefix = f"{name}="
    if not folder.is_dir():
        return []
    return sorted(p.name[len(prefix) :] for p in folder.iterdir() if p.is_dir() and p.name.startswith(prefix))


def bronze_days(bronze_table: str) -> list[dt.date]:
    """Days that have at least one archived batch."""
    return [
        parse_day(d)
        for d in _partition_values(Path(bronze_table), "date")
        if bronze_batches(bronze_table, parse_day(d))
    ]


def bronze_batches(bronze_table: str, day: dt.date) -> list[int]:
    """Batch ids that archived rows of `day`."""
    return sorted(int(b) for b in _partition_values(day_folder(bronze_table, day), "batch_id"))


def batch_days(bronze_table: str) -> dict[int, set[dt.date]]:
    """For every archived batch, the days its rows fall on (from the folder names alone)."""
    days: dict[int, set[dt.date]] = {}
    for day in bronze_days(bronze_table):
        for batch in bronze_batches(bronze_table, day):
            days.setdefault(batch, set()).add(day)
    return days


def first_day_of(bronze_table: str) -> Callable[[int], dt.date | None]:
    """batch id -> the first day the bronze archive holds rows of it (None: no rows archived).
    Lists the day folders once; then one `stat` per day and batch asked about."""
    days = bronze_days_listed(bronze_table)

    def first_day(batch: int) -> dt.date | None:
        return next((d for d in days if (day_folder(bronze_table, d) / f"batch_id={batch}").is_dir()), None)

    return first_day


def bronze_days_listed(bronze_table: str) -> list[dt.date]:
    """The days of the archive's `date=` folders, oldest first (without looking inside them)."""
    return sorted(parse_day(d) for d in _partition_values(Path(bronze_table), "date"))


def expire_days(bronze_table: str, oldest_kept: dt.date) -> list[dt.date]:
    """Delete the archive's days before `oldest_kept`; the days deleted. Each day is first renamed
    to a hidden name (readers never see half a day), then deleted; `.expired-*` leftovers of a
    killed run go too."""
    root = Path(bronze_table)
    expired = [d for d in bronze_days_listed(bronze_table) if d < oldest_kept]
    for day in expired:
        folder = day_folder(bronze_table, day)
        folder.rename(folder.with_name(f"{EXPIRED_PREFIX}{folder.name}"))
    for leftover in root.glob(f"{EXPIRED_PREFIX}*") if root.is_dir() else []:
        shutil.rmtree(leftover, ignore_errors=True)
    return expired


def read_bronze_day(spark: SparkSession, bronze_table: str, day: dt.date, schema: T.StructType) -> DataFrame:
    """The archived rows of one day (every batch), or an empty frame of `schema` if none."""
    folder = day_folder(bronze_table, day)
    if not bronze_batches(bronze_table, day):
        return spark.createDataFrame([], schema)
    # basePath keeps `batch_id` as a column; reading only this folder prunes the other days.
    return spark.read.option("basePath", str(folder)).parquet(str(folder))


def replace_day(frame: DataFrame, table: str, day: dt.date) -> int:
    """Write `frame` as the whole partition `day` of `table` (replacing it); its row count.

    Written to a staging folder first and swapped in, so a failed run leaves the previous
    partition intact rather than half of a new one.
    """
    target = day_folder(table, day)
    staging = target.with_name(f".staging-{target.name}")
    shutil.rmtree(staging, ignore_errors=True)
    frame.write.mode("overwrite").parquet(str(staging))
    rows = frame.sparkSession.read.parquet(str(staging)).count()
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return rows


def read_days(spark: SparkSession, table: str, days: list[dt.date]) -> DataFrame | None:
    """Partitions `days` of a daily table with their `date` column; None if none exists."""
    folders = [str(day_folder(table, d)) for d in days if day_folder(table, d).is_dir()]
    if not folders:
        return None
    return spark.read.option("basePath", table).parquet(*folders)
