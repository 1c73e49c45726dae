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

from elasticity.state import uris

DATE_FORMAT = "%Y-%m-%d"
EXPIRED_PREFIX = ".expired-"


def parse_day(text: str) -> dt.date:
    """A YYYY-MM-DD day, or ValueError with a sentence saying what was expected."""
    try:
        return dt.datetime.strptime(text, DATE_FORMAT).date()
    except ValueError:
        raise ValueError(f"{text!r} is not a date in YYYY-MM-DD form") from None


def _folder(table: str) -> Path:
    """The table's local folder: these tables swap and expire folders by rename, so a table on an
    object store is refused by name (RemoteRoot), never read as a relative path."""
    return Path(uris.local_path(table, "the bronze archive and the daily tables (backfills, expiry)"))


def day_folder(table: str, day: dt.date) -> Path:
    return _folder(table) / f"date={day.isoformat()}"


def _partition_values(folder: Path, name: str) -> list[str]:
    prefix = f"{name}="
    if not folder.is_dir():
        return []
    return sorted(p.name[len(prefix) :] for p in folder.iterdir() if p.is_dir() and p.name.startswith(prefix))


def bronze_days(bronze_table: str) -> list[dt.date]:
    """Days that have at least one archived batch."""
    return [
        parse_day(d)
        for d in _partition_values(_folder(bronze_table), "date")
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
    return sorted(parse_day(d) for d in _partition_values(_folder(bronze_table), "date"))


def expire_archive(bronze_table: str, cutoff: dt.datetime, ahead_s: float = 0.0) -> int:
    """Delete what the archive took in before `cutoff` (UTC); the folders deleted.

    Days before the cutoff's date go whole. In later days, the batch folders written before the
    cutoff (by modification time: a batch folder is written once, when its batch runs) go one by
    one, and a day left without batches goes too; a retention shorter than a day (an endurance
    run) is thus honoured. A day more than `ahead_s` (how far an event's time may lie ahead of its
    arrival) past the cutoff cannot hold a batch written before it and is not looked into. Each
    folder is first renamed to a hidden name (readers never see half of it), then deleted."""
    removed = 0
    last_day_to_look_into = (cutoff + dt.timedelta(seconds=ahead_s)).date()
    for day in bronze_days_listed(bronze_table):
        folder = day_folder(bronze_table, day)
        if day < cutoff.date():
            removed += _remove_hidden(folder)
        elif day <= last_day_to_look_into:
            removed += _expire_batches(folder, cutoff.timestamp())
    remove_expired_leftovers(bronze_table)
    return removed


def _expire_batches(day: Path, cutoff_s: float) -> int:
    batches = [b for b in day.iterdir() if b.name.startswith("batch_id=")]
    old = [b for b in batches if _modified_s(b) < cutoff_s]
    removed = sum(_remove_hidden(b) for b in old)
    if old and len(old) == len(batches):
        removed += _remove_hidden(day)
    return removed


def _modified_s(folder: Path) -> float:
    try:
        return folder.stat().st_mtime
    except FileNotFoundError:
        return float("inf")


def _remove_hidden(folder: Path) -> int:
    hidden = folder.with_name(f"{EXPIRED_PREFIX}{folder.name}")
    folder.rename(hidden)
    shutil.rmtree(hidden, ignore_errors=True)
    return 1


def remove_expired_leftovers(bronze_table: str) -> None:
    """`.expired-*` folders a killed expiry left (of days, or of batches inside a day)."""
    root = _folder(bronze_table)
    if root.is_dir():
        for leftover in [*root.glob(f"{EXPIRED_PREFIX}*"), *root.glob(f"date=*/{EXPIRED_PREFIX}*")]:
            shutil.rmtree(leftover, ignore_errors=True)


def read_bronze_days(
    spark: SparkSession, bronze_table: str, days: list[dt.date], schema: T.StructType | None
) -> DataFrame:
    """The archived rows of `days` (every batch) with their `date` and `batch_id` columns, or an
    empty frame of `schema` if none (None: the schema of the archive's files)."""
    folders = [str(day_folder(bronze_table, d)) for d in days if bronze_batches(bronze_table, d)]
    if folders:
        # basePath keeps `date` and `batch_id` as columns; reading only these folders prunes the other days.
        return spark.read.option("basePath", str(_folder(bronze_table))).parquet(*folders)
    if schema is None:
        if not bronze_days(bronze_table):
            raise ValueError(f"the bronze archive {bronze_table} is empty: nothing tells its columns")
        schema = spark.read.parquet(str(_folder(bronze_table))).drop("date", "batch_id").schema
    return spark.createDataFrame([], schema)


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
    return spark.read.option("basePath", str(_folder(table))).parquet(*folders)
