"""What a stream's driver does between batches to keep its tables bounded: every
`compact_every_batches` batches it compacts the results and late tables (see
`pipelines.streams.compaction`) and deletes what the bronze archive took in more than
`bronze_retention_days` ago.

The driver is the tables' one writer (it holds the stream's lease) and runs this inside a batch,
before the batch writes anything, so no write of its own races the compaction.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from elasticity.state import Location, uris
from pipelines.batch import tables
from pipelines.streams import compaction
from pipelines.streams.compaction import CompactionReport
from pipelines.streams.files import StreamFiles
from pipelines.streams.spec import StreamSpec

log = logging.getLogger(__name__)

CONTROL_TEMPORARY_AGE_S = 3600.0
"""A `.tmp-*` file in the control folder this old is a crashed publisher's (a publish takes ms);
younger ones may be a live requester's (the sensor, `esp stream rescale`)."""


@dataclass
class TableRetention:
    spark: SparkSession
    spec: StreamSpec
    key_columns: tuple[str, ...]
    unsupported: bool = False
    """Set when the file system cannot swap folders atomically: compaction is off, never a failed batch."""

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

    def run(self, batch_id: int, now: dt.datetime | None = None) -> list[CompactionReport]:
        """Compact the batches committed before `batch_id` (the batch in flight); expire old bronze."""
        committed = StreamFiles(self.spec).newest_committed_batch()
        if committed is None:
            return []
        upto = min(committed, batch_id - 1)
        day_of = tables.first_day_of(self.spec.bronze_table)
        folds = (
            (self.spec.results_table, compaction.newest_per_key(list(self.key_columns))),
            (self.spec.late_table, compaction.summed("n")),
        )
        try:
            reports = [
                compaction.compact(self.spark, Path(uris.local_path(table)), fold, upto, day_of)
                for table, fold in folds
            ]
        except compaction.CompactionUnsupported as error:
            log.error("table compaction is off for stream %s: %s", self.spec.name, error)
            self.unsupported, reports = True, []
        cutoff = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=self.spec.bronze_retention_days)
        tables.expire_archive(self.spec.bronze_table, cutoff, ahead_s=self.spec.max_event_time_ahead_s)
        return reports
