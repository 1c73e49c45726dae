"""Two closed days of word-count bronze rows, written as the stream writes them, for the backfill test."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.streams.names import bronze_table_path

TODAY = dt.datetime.now(dt.UTC).date()
DAYS = [TODAY - dt.timedelta(days=n) for n in (2, 1)]
LINES = {DAYS[0]: ["a b a", "c"], DAYS[1]: ["b b", "d e"]}


def write_bronze(root: Path) -> None:
    """Word-count bronze rows in the stream's layout (date=/batch_id= folders)."""
    for batch, (day, lines) in enumerate(LINES.items()):
        folder = Path(bronze_table_path(root)) / f"date={day.isoformat()}" / f"batch_id={batch}"
        folder.mkdir(parents=True)
        noon = dt.datetime.combine(day, dt.time(12), tzinfo=dt.UTC)
        pq.write_table(
            pa.table(
                {
                    "line": lines,
                    "topic": ["words"] * len(lines),
                    "partition": pa.array([0] * len(lines), pa.int32()),
                    "offset": pa.array(range(len(lines)), pa.int64()),
                    "timestamp": pa.array([noon] * len(lines), pa.timestamp("us", "UTC")),
                }
            ),
            folder / "part-00000.parquet",
        )
