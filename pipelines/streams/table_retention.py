"""What a stream's driver does between batches to keep its tables bounded: every
`compact_every_batches` batches it compacts the results and late tables (see
`pipelines.streams.compaction`) and deletes what the bronze archive took in more than
`bronze_retention_days` ago.

The driver is the tables' one writer (it holds the stream's lease). A compaction runs in two
phases (`compaction.stage`, `compaction.publish`) so the Spark folds stay off the batches' time:

- staging, the folds of committed batches into a hidden folder, runs on a background thread
  while the next batches run; it reads only committed folders, which no batch rewrites, and
  writes only the hidden folder, so the batches' writes of their own folders never race it;
- publishing (links, the atomic swap) and the bronze expiry run on the driver at a batch
  boundary, before the batch writes anything: nothing writes the tables then, so every folder
  written while the staging ran is linked whole into the new table.

A staging not yet published when the stream stops is deleted then (once it ended), or else left
in its hidden folder for `recover` at the next start, like the leftovers of a killed compaction.
"""

from __future__ import annotations

import datetime as dt
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession

from elasticity.state import Location, uris
from pipelines.batch import tables
from pipelines.streams import compaction
from pipelines.streams.compaction import CompactionReport, Fold, StagedCompaction
from pipelines.streams.files import StreamFiles
from pipelines.streams.spec import StreamSpec

log = logging.getLogger(__name__)

CONTROL_TEMPORARY_AGE_S = 3600.0
"""A `.tmp-*` file in the control folder this old is a crashed publisher's (a publish takes ms);
younger ones may be a live requester's (the sensor, `esp stream rescale`)."""

CLOSE_WAIT_S = 60.0
"""How long a stop waits for a staging in flight (one takes seconds) before leaving it to `recover`."""


@dataclass(frozen=True)
class TableStaging:
    """One table's outcome of a background staging: the staged compaction, or None when the
    table had nothing to fold."""

    table: Path
    staged: StagedCompaction | None


@dataclass
class TableRetention:
    spark: SparkSession
    spec: StreamSpec
    key_columns: tuple[str, ...]
    unsupported: bool = False
    """Set when the file system cannot swap folders atomically: compaction is off, never a failed batch."""
    _worker: ThreadPoolExecutor | None = field(default=None, repr=False)
    _staging: Future[list[TableStaging]] | None = field(default=None, repr=False)
    """The staging in flight or done but not published yet (one at a time)."""

    @property
    def local(self) -> bool:
        # renameat2, hard links and folder mtimes: the tables must be on a local file system.
        return uris.is_local(self.spec.root)

    def recover(self) -> None:
        """At start: delete what a compaction or an expiry killed midway left behind, and the
        temporaries of crashed publishers in the control folder (the elastic folder's are the
        migrator's `recover`)."""
        Location.of(self.spec.control_dir).clean_temporaries(older_than_s=CONTROL_TEMPORARY_AGE_S)
        if not self.local:
            log.warning(
                "table compaction and bronze expiry are off for stream %s: its folder %s is on an object store "
                "(they need a local file system); its tables grow until cleaned by the store's own lifecycle rules",
                self.spec.name,
                self.spec.root,
            )
            return
        for table in (self.spec.results_table, self.spec.late_table):
            compaction.recover(Path(uris.local_path(table)))
        tables.remove_expired_leftovers(uris.local_path(self.spec.bronze_table))

    def due(self, batch_id: int) -> bool:
        every = self.spec.compact_every_batches
        return self.local and not self.unsupported and every > 0 and batch_id > 0 and batch_id % every == 0

    def start_if_due(self, batch_id: int) -> bool:
        """At the start of batch `batch_id`: begin staging a compaction when one is due (True if begun)."""
        return self.due(batch_id) and self.start(batch_id)

    def start(self, batch_id: int) -> bool:
        """Begin staging, in the background, the compaction of the batches committed before
        `batch_id` (the batch in flight); False if a staging is in flight or nothing is committed."""
        if self._staging is not None:
            return False
        committed = StreamFiles(self.spec).newest_committed_batch()
        if committed is None:
            return False
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.spec.name}-compaction")
        self._staging = self._worker.submit(self._stage_tables, min(committed, batch_id - 1))
        return True

    def publish_ready(self, now: dt.datetime | None = None, wait_s: float = 0.0) -> list[CompactionReport]:
        """At a batch boundary (nothing writes the tables): swap in a staging that is done, waiting
        at most `wait_s` for it, then expire old bronze; the reports, empty if none was ready or
        it failed (logged: a compaction never fails a batch)."""
        staging = self._staging
        if staging is None or not wait_for([staging], timeout=wait_s).done:
            return []
        self._staging = None
        error = staging.exception()
        if error is not None:
            log.error("compaction staging of stream %s failed: %s", self.spec.name, error, exc_info=error)
            self._discard()
            reports: list[CompactionReport] = []
        else:
            reports = self._publish(staging.result())
        cutoff = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=self.spec.bronze_retention_days)
        tables.expire_archive(self.spec.bronze_table, cutoff, ahead_s=self.spec.max_event_time_ahead_s)
        return reports

    def close(self, timeout_s: float = CLOSE_WAIT_S) -> None:
        """At the stream's stop: wait (bounded) for a staging in flight and stop the worker. An
        unpublished staging is deleted if it ended, else left to `recover` at the next start."""
        staging, worker = self._staging, self._worker
        self._staging, self._worker = None, None
        if staging is not None and wait_for([staging], timeout=timeout_s).done:
            self._discard()
        elif staging is not None:
            log.warning(
                "stream %s stops with a compaction staging still running: the next start deletes it", self.spec.name
            )
        if worker is not None:
            worker.shutdown(wait=False, cancel_futures=True)

    def _folds(self) -> list[tuple[Path, Fold]]:
        """The tables compacted, each with its fold."""
        return [
            (Path(uris.local_path(self.spec.results_table)), compaction.newest_per_key(list(self.key_columns))),
            (Path(uris.local_path(self.spec.late_table)), compaction.summed("n")),
        ]

    def _stage_tables(self, upto: int) -> list[TableStaging]:
        """The background part: stage both tables' compactions of the batches <= `upto`."""
        day_of = tables.first_day_of(self.spec.bronze_table)
        return [
            TableStaging(table, compaction.stage(self.spark, table, fold, upto, day_of))
            for table, fold in self._folds()
        ]

    def _publish(self, stagings: list[TableStaging]) -> list[CompactionReport]:
        """Swap each staged table in; a table whose swap fails is left as it was (logged)."""
        reports = []
        for staging in stagings:
            if self.unsupported:  # the swap failed on the table before: drop the staged rest
                compaction.recover(staging.table)
                continue
            try:
                reports.append(self._publish_table(staging))
            except compaction.CompactionUnsupported as error:
                log.error("table compaction is off for stream %s: %s", self.spec.name, error)
                self.unsupported = True
            except Exception:
                # After the swap the hidden folder is the old table, before it a half-built new
                # one: deleting it is right either way.
                log.exception(
                    "compaction of %s for stream %s failed; the table stays readable", staging.table, self.spec.name
                )
                compaction.recover(staging.table)
        return reports

    @staticmethod
    def _publish_table(staging: TableStaging) -> CompactionReport:
        if staging.staged is None:
            return CompactionReport(str(staging.table), 0, len(compaction.batch_folders(staging.table)))
        return compaction.publish(staging.staged)

    def _discard(self) -> None:
        """Delete the hidden folders of a staging that will not be published."""
        for table, _ in self._folds():
            compaction.recover(table)
