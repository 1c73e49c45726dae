"""Compaction of a stream's per-batch table folders (results, late rows), so a stream that runs
for months keeps a bounded number of folders: one per day plus the last few batches, instead of
one per micro-batch (~86,000 a day at a 1 s trigger, probes force a batch every trigger).

Layout, before and after: `<table>/batch_id=<b>/*.parquet`. Readers discover `batch_id` from the
folder name (Spark, pyarrow with hive partitioning), so a compacted folder is an ordinary
`batch_id=<b>` folder whose rows all read as batch `b`. What a fold keeps:

- results (`newest_per_key`): every row written by its key's newest batch among the folded ones
  (Spark's `latest_view`), labelled with the newest folded batch. Every "newest row per key"
  reader gives the same answer, and the counts of the later batches stay newer.
- late rows (`summed`): the late counts summed per (campaign, window); readers only sum them.

Batches are folded by *bronze day* (the smallest `date=` of the batch in the bronze archive), one
compacted folder per day: the daily reconcile reads a word's increments with `lag` over batch ids
and attributes them to the day of the batch, and a folder spanning one day keeps each day's sum
of increments exact. Batches without bronze (no input, or the archive is off or expired) join the
day before them.

Only batches committed in Spark's checkpoint are folded, never the batch in flight (a replay
overwrites its folder). Crash safety: the whole new table is built in a hidden sibling folder
(Spark and pyarrow ignore names starting with `.`): the folded folders written by Spark, every
other folder hard-linked; then one `renameat2(RENAME_EXCHANGE)` swaps the two folders atomically,
and the old table (now at the hidden name) is deleted. A reader sees either table, never a mix;
a SIGKILL anywhere leaves either the old or the new table live, and the hidden folder (a half
built table or the old one) is deleted at the next start or compaction.

Two phases, so that a stream's batches do not wait for the Spark folds (~3 s for ~100 folders,
longer than a capped batch):

- `stage`: the expensive part, the Spark folds of the committed batches <= `upto` into the hidden
  folder, made durable. It only reads folders that nothing rewrites any more (committed batches),
  and only writes the hidden folder, so it may run in the background while the stream writes new
  `batch_id=<b>` folders (b > upto) into the live table. It links nothing: a folder being written
  at that moment would be linked half-written.
- `publish`: quick (links, a marker, fsyncs, one rename), at a batch boundary when nothing writes
  the table: every live entry not folded is hard-linked into the hidden folder, including those
  written while staging ran, then the two folders are swapped.

`compact` is both in a row.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import errno
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from elasticity.state import Location
from elasticity.state.files import fsync_dir

log = logging.getLogger(__name__)

BATCH_PREFIX = "batch_id="
STAGING_PREFIX = ".compact-"
MARKER = "_compacted.json"
"""In a compacted table: the newest batch folded (`upto`); hidden from Spark and pyarrow by its `_`."""

Fold = Callable[[DataFrame, "Label"], DataFrame]
"""(rows of the folded folders, the batch id they are labelled with) -> the compacted rows."""


@dataclass(frozen=True)
class Label:
    """The batch id a compacted folder's rows carry, and the SQL type of the files' `batch_id`
    column (kept, so that a reader merging the files' schemas finds one type)."""

    batch_id: int
    sql_type: str = "int"

    def column(self, name: str = "batch_id"):
        return F.lit(self.batch_id).cast(self.sql_type).alias(name)


DayOf = Callable[[int], "dt.date | None"]


class CompactionUnsupported(OSError):
    """The file system cannot swap two folders atomically (not Linux, or no RENAME_EXCHANGE)."""


@dataclass(frozen=True)
class CompactionReport:
    table: str
    folded: int
    """Folders folded away (0: nothing to do)."""
    folders: int
    """Folders of the table after the compaction."""


def newest_per_key(keys: list[str]) -> Fold:
    """The results fold: every row of its key's newest batch (duplicates kept, for the suites)."""

    def fold(rows: DataFrame, label: Label) -> DataFrame:
        newest = F.max("batch_id").over(Window.partitionBy(*keys))
        kept = rows.withColumn("_newest", newest).where(F.col("batch_id") == F.col("_newest"))
        return kept.select(*[label.column() if c == "batch_id" else F.col(c) for c in rows.columns])

    return fold


def summed(value: str) -> Fold:
    """The late-rows fold: `value` summed over every other column (totals unchanged)."""

    def fold(rows: DataFrame, label: Label) -> DataFrame:
        others = [c for c in rows.columns if c not in (value, "batch_id")]
        total = rows.groupBy(*others).agg(F.sum(value).cast(rows.schema[value].dataType).alias(value))
        return total.select(*[label.column() if c == "batch_id" else F.col(c) for c in rows.columns])

    return fold


def _batch_id_type(folder: Path) -> str:
    """The SQL type of the `batch_id` column in the folder's files ("int" if they have none)."""
    import pyarrow.parquet as pq

    files = sorted(folder.glob("*.parquet"))
    schema = pq.read_schema(files[0]) if files else None
    if schema is None or "batch_id" not in schema.names:
        return "int"
    return "bigint" if schema.field("batch_id").type.bit_width == 64 else "int"


def batch_folders(table: Path) -> dict[int, Path]:
    """batch id -> its folder, for every `batch_id=<b>` folder of `table`."""
    if not table.is_dir():
        return {}
    folders = {}
    for entry in table.iterdir():
        value = entry.name.removeprefix(BATCH_PREFIX)
        if entry.name.startswith(BATCH_PREFIX) and value.isdigit() and entry.is_dir():
            folders[int(value)] = entry
    return folders


def compacted_upto(table: str | Path) -> int | None:
    """The newest batch folded into `table` (None: never compacted)."""
    stored = Location.of(os.fspath(table)).read_document(MARKER)  # a reader may look at a remote root
    return None if stored is None else int(json.loads(stored)["upto"])


def staging_folder(table: Path) -> Path:
    return table.with_name(f"{STAGING_PREFIX}{table.name}")


def recover(table: Path) -> None:
    """Delete what a compaction killed midway left: a half-built table or the old one (both hidden)."""
    shutil.rmtree(staging_folder(table), ignore_errors=True)


def day_groups(batches: list[int], day_of: DayOf) -> list[tuple[int, list[int]]]:
    """(label, batches) per run of consecutive batches of one bronze day; a batch without a day
    joins the run before it, so the days whose bronze expired fold into one run. The label is the
    run's newest batch that has the run's day, so the daily reconcile attributes it to that day."""
    days = {batch: day_of(batch) for batch in batches}
    runs: list[tuple[dt.date | None, list[int]]] = []
    for batch in batches:
        day = days[batch]
        if runs and (day is None or day == runs[-1][0]):
            runs[-1][1].append(batch)
        else:
            runs.append((day, [batch]))
    return [(max(b for b in members if days[b] == day), members) for day, members in runs]


@dataclass(frozen=True)
class StagedCompaction:
    """A table's folds written (and made durable) in its hidden staging folder, not yet swapped in:
    what `publish` needs to finish the compaction."""

    table: Path
    staged: Path
    """The hidden folder holding the folded `batch_id=<label>` folders."""
    folded: frozenset[int]
    """The batches folded away (their folders are not linked into the new table)."""
    groups: int
    """The folded folders written, one per run of a bronze day."""
    upto: int
    """The newest batch folded into the new table (its marker)."""


def stage(spark: SparkSession, table: Path, fold: Fold, upto: int, day_of: DayOf) -> StagedCompaction | None:
    """Fold the folders of batches <= `upto` (committed ones) into one folder per bronze day, in
    the hidden staging folder (None: nothing to fold). Safe while the stream writes folders of
    batches > `upto` into `table`: only committed folders are read, only the hidden one written."""
    recover(table)
    folders = {b: folder for b, folder in batch_folders(table).items() if b <= upto}
    groups = [group for group in day_groups(sorted(folders), day_of) if len(group[1]) > 1]
    if not groups:
        return None
    staged = staging_folder(table)
    for label, members in groups:
        rows = spark.read.option("basePath", str(table)).parquet(*[str(folders[b]) for b in members])
        fold(rows, Label(label, _batch_id_type(folders[label]))).write.mode("errorifexists").parquet(
            str(staged / f"{BATCH_PREFIX}{label}")
        )
    _fsync_tree(staged)
    folded = frozenset(b for _, members in groups for b in members)
    return StagedCompaction(table, staged, folded, len(groups), max(max(folded), compacted_upto(table) or -1))


def publish(staged: StagedCompaction) -> CompactionReport:
    """Swap the staged compaction in: link every live entry that was not folded (folders written
    since the staging began too), write the marker, swap. Call it when nothing writes the table."""
    table, folder = staged.table, staged.staged
    folded_names = {f"{BATCH_PREFIX}{b}" for b in staged.folded}
    for entry in table.iterdir():
        if entry.name != MARKER and entry.name not in folded_names:
            _link_tree(entry, folder / entry.name)
            _fsync_tree(folder / entry.name)
    (folder / MARKER).write_text(json.dumps({"upto": staged.upto}))
    _fsync_file(folder / MARKER)
    fsync_dir(str(folder))
    try:
        exchange(table, folder)
    except OSError as error:
        shutil.rmtree(folder, ignore_errors=True)
        raise CompactionUnsupported(f"compaction of {table} needs an atomic folder swap: {error}") from error
    shutil.rmtree(folder)
    return CompactionReport(str(table), len(staged.folded) - staged.groups, len(batch_folders(table)))


def compact(spark: SparkSession, table: Path, fold: Fold, upto: int, day_of: DayOf) -> CompactionReport:
    """Fold the folders of batches <= `upto` (committed ones) into one folder per bronze day: both
    phases in a row, for a caller that writes nothing meanwhile."""
    staged = stage(spark, table, fold, upto, day_of)
    if staged is None:
        return CompactionReport(str(table), 0, len(batch_folders(table)))
    return publish(staged)


def _link_tree(source: Path, target: Path) -> None:
    """Hard-link `source` (a file or a folder of files) at `target`: no data is copied."""
    if source.is_dir():
        shutil.copytree(source, target, copy_function=os.link)
    else:
        os.link(source, target)


def _fsync_tree(root: Path) -> None:
    """Make a staged entry durable before it is swapped in (a power loss must not expose holes).
    `root` may be a single file (a linked entry that is not a folder)."""
    if root.is_file():
        _fsync_file(root)
        return
    for folder, _, files in os.walk(root):
        for name in files:
            _fsync_file(Path(folder, name))
        fsync_dir(folder)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> None:
    """Swap two folders atomically (Linux renameat2 RENAME_EXCHANGE): no moment shows neither."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"could not swap {a} and {b}: {os.strerror(error)}")
    descriptor = os.open(a.parent, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
