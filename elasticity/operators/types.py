"""The plain types shared by the operator API, its state view and the runner: the key-hash
column, time domains, the fired-timer schema and the batch `Context`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import pyarrow as pa

HASH_COLUMN = "key_hash"
"""The int64 column of each row's key hash (Spark's `xxhash64` of the key), added by the runner
if the input lacks it; state and timers are placed by it, so keys stay where the layout routes them."""

REJECT_REASON_COLUMN = "reason"


class TimeDomain(StrEnum):
    """When a timer fires: once the watermark (event time) or the batch's processing time reaches it."""

    EVENT = "event"
    PROCESSING = "processing"


FIRED_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field(HASH_COLUMN, pa.int64(), nullable=False),
        pa.field("time", pa.int64(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
    ]
)
"""The table `on_timer` receives: one row per fired timer, in (time, key) order."""


@dataclass
class Context:
    """What an operator knows about the batch besides its rows; times are epoch milliseconds.

    `watermark_ms` is the batch's event-time watermark (Spark keeps it in its offset log, so a
    re-run batch sees the same one); `processing_ms` the batch's processing timestamp, likewise.
    """

    batch_id: int
    watermark_ms: int
    processing_ms: int
    channel: int
    rejected: list[pa.Table] = field(default_factory=list)

    def reject(self, rows: pa.Table, reason: str) -> None:
        """Report rows not counted (late, malformed), with a reason; they are not outputs."""
        if rows.num_rows:
            reasons = pa.array([reason] * rows.num_rows, type=pa.string())
            self.rejected.append(rows.append_column(REJECT_REASON_COLUMN, reasons))
