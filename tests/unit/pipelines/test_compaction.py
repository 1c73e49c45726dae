"""Compaction of the per-batch results and late folders: every reader's answer is unchanged, the
folders are bounded, the batch in flight is never folded, and a SIGKILL at any point leaves the
tables readable with the same answers (a restart undoes or finishes the compaction)."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.batch import tables
from pipelines.streams import compaction
from pipelines.streams.compaction import batch_folders, compacted_upto
from pipelines.streams.spec import StreamSpec
from pipelines.streams.table_retention import TableRetention
from tests.conftest import REPO_ROOT
from tests.unit.pipelines.compaction_tables import DAY, answers, write_stream_tables

FOLDS = {"results": compaction.newest_per_key(["word"]), "late": compaction.summed("n")}


def _spec(tmp_path) -> StreamSpec:
    return StreamSpec(root=str(tmp_path / "wordcount"), compact_every_batches=10, bronze_retention_days=7)


def _compact_all(spark, spec: StreamSpec, upto: int) -> None:
    day_of = tables.first_day_of(spec.bronze_table)
    for table, fold in ((spec.results_table, FOLDS["results"]), (spec.late_table, FOLDS["late"])):
        compaction.compact(spark, Path(table), fold, upto, day_of)


def _stage_all(spark, spec: StreamSpec, upto: int) -> list[compaction.StagedCompaction]:
    day_of = tables.first_day_of(spec.bronze_table)
    staged = [
        compaction.stage(spark, Path(table), fold, upto, day_of)
        for table, fold in ((spec.results_table, FOLDS["results"]), (spec.late_table, FOLDS["late"]))
    ]
    assert all(s is not None for s in staged)
    return [s for s in staged if s is not None]


DAY_AFTER = dt.datetime.combine(DAY + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
"""The tests' clock unless one says otherwise: the tables' bronze is of DAY and expires with the
retention, so the real clock would expire it once DAY is a week old (a test failed so on 2026-11-28)."""


def _retain(
    retention: TableRetention, batch_id: int, now: dt.datetime = DAY_AFTER
) -> list[compaction.CompactionReport]:
    """What the stream does over a few batches: stage at batch `batch_id`, publish at a later one."""
    assert retention.start(batch_id)
    return retention.publish_ready(now=now, wait_s=120)


def test_day_groups_keep_days_apart_and_label_a_batch_of_the_day():
    days = {0: "a", 1: None, 2: "a", 3: "b", 4: None, 5: None, 6: "c"}
    assert compaction.day_groups(sorted(days), days.get) == [(2, [0, 1, 2]), (3, [3, 4, 5]), (6, [6])]
    # Batches whose bronze expired (no day) fold together, never into an archived day.
    assert compaction.day_groups([0, 1, 2], {2: "a"}.get) == [(1, [0, 1]), (2, [2])]


def test_compaction_keeps_every_readers_answer_and_one_folder_per_day(spark, tmp_path):
    spec = _spec(tmp_path)
    write_stream_tables(spark, spec, range(30))
    before = answers(spark, spec)

    _compact_all(spark, spec, upto=28)

    assert answers(spark, spec) == before
    # Days: batches 0-9, 10-19, 20-28 (labelled by their newest batch with a day), then 29 untouched.
    assert sorted(batch_folders(Path(spec.results_table))) == [9, 18, 28, 29]
    assert sorted(batch_folders(Path(spec.late_table))) == [9, 18, 28, 29]
    assert compacted_upto(spec.results_table) == 28

    write_stream_tables(spark, spec, range(30, 45))
    before = answers(spark, spec)
    _compact_all(spark, spec, upto=44)
    assert answers(spark, spec) == before
    assert sorted(batch_folders(Path(spec.results_table))) == [9, 18, 44]


def test_the_batch_in_flight_and_uncommitted_batches_are_never_folded(spark, tmp_path):
    spec = _spec(tmp_path)
    write_stream_tables(spark, spec, range(12))
    commits = Path(spec.checkpoint) / "commits"
    commits.mkdir(parents=True)
    for b in range(9):  # batches 9 and 10 are planned but not committed; 11 is in flight
        (commits / str(b)).write_text("v1\n{}")
    unfolded = {b: batch_folders(Path(spec.results_table))[b] for b in (9, 10, 11)}
    inodes = {b: [f.stat().st_ino for f in sorted(p.iterdir())] for b, p in unfolded.items()}
    before = answers(spark, spec)

    _retain(TableRetention(spark, spec, ("word",)), batch_id=11)

    assert answers(spark, spec) == before
    folders = batch_folders(Path(spec.results_table))
    assert sorted(folders) == [8, 9, 10, 11] and compacted_upto(spec.results_table) == 8
    # Hard links of the very same files: a replay of a later batch overwrites a folder of its own.
    assert {b: [f.stat().st_ino for f in sorted(folders[b].iterdir())] for b in (9, 10, 11)} == inodes


def test_a_batch_written_while_the_compaction_is_staged_is_in_the_published_table(spark, tmp_path):
    # The stream stages in the background while its next batches write their folders into the
    # live table; publish, at a batch boundary, must link those too. An implementation that
    # linked the live folders at staging time would swap in a table without batch 30: its folder
    # and rows would vanish (and a folder being written then would be linked half-written).
    spec, reference = _spec(tmp_path / "staged"), _spec(tmp_path / "reference")
    for tables_spec in (spec, reference):
        write_stream_tables(spark, tables_spec, range(30))
    write_stream_tables(spark, reference, range(30, 31))  # the same tables, never compacted

    staged = _stage_all(spark, spec, upto=28)
    write_stream_tables(spark, spec, range(30, 31))  # a batch runs while the staging is done
    new = {table: batch_folders(Path(table))[30] for table in (spec.results_table, spec.late_table)}
    inodes = {table: sorted(f.stat().st_ino for f in folder.iterdir()) for table, folder in new.items()}
    reports = [compaction.publish(s) for s in staged]

    assert answers(spark, spec) == answers(spark, reference)
    for table in (spec.results_table, spec.late_table):
        folders = batch_folders(Path(table))
        assert sorted(folders) == [9, 18, 28, 29, 30]
        # The new batch's very files (hard links), not a copy made at staging time.
        assert sorted(f.stat().st_ino for f in folders[30].iterdir()) == inodes[table]
    assert compacted_upto(spec.results_table) == 28
    assert [(r.folded, r.folders) for r in reports] == [(26, 5), (26, 5)]
    assert not compaction.staging_folder(Path(spec.results_table)).exists()


def test_a_staging_left_unpublished_is_removed_at_the_start_and_the_table_is_unchanged(spark, tmp_path):
    spec = _spec(tmp_path)
    write_stream_tables(spark, spec, range(30))
    before = answers(spark, spec)

    _stage_all(spark, spec, upto=28)  # then the stream stops (or is killed) before publishing
    assert compaction.staging_folder(Path(spec.results_table)).is_dir()
    assert answers(spark, spec) == before  # readers never see the hidden folder

    TableRetention(spark, spec, ("word",)).recover()  # what the stream's start does
    for table in (spec.results_table, spec.late_table):
        assert not compaction.staging_folder(Path(table)).exists()
        assert sorted(batch_folders(Path(table))) == list(range(30))
    assert compacted_upto(spec.results_table) is None
    assert answers(spark, spec) == before


def test_a_stop_drops_the_staging_in_flight_and_publishes_nothing(spark, tmp_path):
    spec = _spec(tmp_path)
    write_stream_tables(spark, spec, range(12))
    (Path(spec.checkpoint) / "commits").mkdir(parents=True)
    (Path(spec.checkpoint) / "commits" / "10").write_text("v1\n{}")
    retention = TableRetention(spark, spec, ("word",))

    assert retention.start_if_due(10) and not retention.start_if_due(10)  # one staging at a time
    retention.close(timeout_s=120)

    assert retention.publish_ready() == []
    assert not compaction.staging_folder(Path(spec.results_table)).exists()
    assert sorted(batch_folders(Path(spec.results_table))) == list(range(12))


def test_bronze_days_older_than_the_retention_are_deleted(spark, tmp_path):
    spec = _spec(tmp_path)
    write_stream_tables(spark, spec, range(30))
    (Path(spec.checkpoint) / "commits").mkdir(parents=True)
    (Path(spec.checkpoint) / "commits" / "29").write_text("v1\n{}")
    now = dt.datetime.combine(DAY + dt.timedelta(days=8), dt.time(), tzinfo=dt.UTC)
    _retain(TableRetention(spark, spec, ("word",)), batch_id=30, now=now)
    assert tables.bronze_days_listed(spec.bronze_table) == [DAY + dt.timedelta(days=1), DAY + dt.timedelta(days=2)]


def test_a_retention_shorter_than_a_day_expires_batch_by_batch(spark, tmp_path):
    spec = _spec(tmp_path).model_copy(update={"bronze_retention_days": 10 / 1440})  # 10 minutes
    write_stream_tables(spark, spec, range(30))
    (Path(spec.checkpoint) / "commits").mkdir(parents=True)
    (Path(spec.checkpoint) / "commits" / "29").write_text("v1\n{}")
    now = dt.datetime.combine(DAY, dt.time(12), tzinfo=dt.UTC)  # the cutoff falls on DAY, at 11:50
    archived = {
        (d, b) for d in tables.bronze_days(spec.bronze_table) for b in tables.bronze_batches(spec.bronze_table, d)
    }
    aged = {(d, b) for d, b in archived if d == DAY and b % 2 == 0}
    for day, batch in aged:  # archived 20 minutes before `now`; the others at the real time, later
        folder = tables.day_folder(spec.bronze_table, day) / f"batch_id={batch}"
        os.utime(folder, (now.timestamp() - 1200, now.timestamp() - 1200))
    _retain(TableRetention(spark, spec, ("word",)), batch_id=30, now=now)
    left = {
        (d, b)
        for d in tables.bronze_days_listed(spec.bronze_table)
        for b in tables.bronze_batches(spec.bronze_table, d)
    }
    assert aged and left == archived - aged
    assert not list(Path(spec.bronze_table).glob("**/.expired-*"))


KILLER = """
import sys, time
from pathlib import Path
from pipelines.settings import EspSettings, SparkSettings
from pipelines.spark_session import build_spark_session
from pipelines.batch import tables
from pipelines.streams import compaction
from pyspark.sql import DataFrameWriter

point, root, marker = sys.argv[1], sys.argv[2], Path(sys.argv[3])

def pause():
    marker.write_text(point)
    time.sleep(600)

exchange, write = compaction.exchange, DataFrameWriter.parquet
if point == "before_exchange":
    compaction.exchange = lambda a, b: pause()
elif point == "after_exchange":
    compaction.exchange = lambda a, b: (exchange(a, b), pause())
else:  # "during_write": a random moment while Spark writes the folded folders
    def writing(self, *args, **kwargs):
        marker.write_text(point)
        return write(self, *args, **kwargs)
    DataFrameWriter.parquet = writing

spark = build_spark_session(EspSettings(project_root=sys.argv[4], spark=SparkSettings(
    master="local[1]", ui_enabled=False, shuffle_partitions=2, app_name="esp-compaction-kill")))
from pipelines.streams.spec import StreamSpec
spec = StreamSpec(root=root)
day_of = tables.first_day_of(spec.bronze_table)
compaction.compact(spark, Path(spec.results_table), compaction.newest_per_key(["word"]), 28, day_of)
compaction.compact(spark, Path(spec.late_table), compaction.summed("n"), 28, day_of)
marker.write_text("done")
time.sleep(600)
"""


@pytest.mark.parametrize("point", ["during_write", "before_exchange", "after_exchange"])
def test_sigkill_mid_compaction_then_restart_gives_the_same_answers(spark, tmp_path, point):
    spec = _spec(tmp_path)
    write_stream_tables(spark, spec, range(30))
    before = answers(spark, spec)
    marker = tmp_path / "marker"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen([sys.executable, "-c", KILLER, point, spec.root, str(marker), str(REPO_ROOT)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), f"the compaction never reached {point}"
        if point == "during_write":
            time.sleep(random.uniform(0.0, 1.5))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()

    # Readers between the kill and the restart: the hidden folder is invisible to them.
    assert answers(spark, spec) == before
    TableRetention(spark, spec, ("word",)).recover()  # what the stream's start does
    assert not compaction.staging_folder(Path(spec.results_table)).exists()
    assert answers(spark, spec) == before
    _compact_all(spark, spec, upto=28)
    assert answers(spark, spec) == before
    assert sorted(batch_folders(Path(spec.results_table))) == [9, 18, 28, 29]


def test_a_start_removes_leftovers_of_killed_writers_but_not_a_live_publish(tmp_path):
    spec = _spec(tmp_path)
    control = Path(spec.control_dir)
    control.mkdir(parents=True)
    crashed, live = control / ".tmp-1-request.json", control / ".tmp-2-request.json"
    crashed.write_text("{")
    live.write_text("{")
    os.utime(crashed, (time.time() - 7200, time.time() - 7200))
    leftovers = [
        compaction.staging_folder(Path(spec.results_table)) / "batch_id=3",
        compaction.staging_folder(Path(spec.late_table)),
        Path(spec.bronze_table) / ".expired-date=2026-01-01" / "batch_id=1",
    ]
    for folder in leftovers:
        folder.mkdir(parents=True)

    TableRetention(None, spec, ("word",)).recover()  # type: ignore[arg-type]  # no Spark needed

    assert not crashed.exists() and live.exists()
    assert not any(folder.exists() for folder in leftovers)
    assert not compaction.staging_folder(Path(spec.results_table)).exists()


def test_without_an_atomic_swap_compaction_turns_off_and_the_tables_stay(spark, tmp_path, monkeypatch):
    # A file system without RENAME_EXCHANGE must not fail every batch of the stream.
    spec = _spec(tmp_path)
    write_stream_tables(spark, spec, range(12))
    (Path(spec.checkpoint) / "commits").mkdir(parents=True)
    (Path(spec.checkpoint) / "commits" / "10").write_text("v1\n{}")
    before = answers(spark, spec)

    def no_swap(a, b):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(compaction, "exchange", no_swap)
    retention = TableRetention(spark, spec, ("word",))
    assert _retain(retention, batch_id=11) == [] and not retention.due(20)
    assert answers(spark, spec) == before
    assert not compaction.staging_folder(Path(spec.results_table)).exists()
    assert sorted(batch_folders(Path(spec.results_table))) == list(range(12))
