"""Malformed records go to a dead-letter topic with the reason, never silently away.

A parser returns the input with a `reject_reason` column (null for good records). Rejected rows
are written to `<stream>.dlq` as JSON: reason, source position and the original value, cut to a
size the broker accepts (the full size is reported).

Every reason is one of `Reason` (the list README.md's "Dead letters" section documents): a
consumer of the topic can switch on it, and a test checks no other text is ever written.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from pipelines.column_cache import once_per_jvm
from pipelines.kafka_io import source_position, write_batch
from pipelines.settings import KafkaConnection

REJECT = "reject_reason"
MAX_VALUE_BYTES = 1_000_000
KEPT_VALUE_CHARS = 2_000
MAX_FIELD_CHARS = 1_000
"""Longest string field of a structured record (an ad event's ids, a probe's routing key): it
becomes a state key and part of result records, which must stay far below the producer's
request size (1 MB) whatever the input holds. Words are cut to `wordcount.MAX_WORD_CHARS`."""
MAX_EPOCH_MS = 253_402_300_800_000
"""Times (an event's, a probe's) lie in [0, MAX_EPOCH_MS): years 1970 to 9999, which Spark's
timestamp functions and date formats take without overflow (|t| > ~9.2e15 ms overflowed
`timestamp_millis` and failed the batch on every replay)."""
AD_FIELDS = ("event_id", "user_id", "page_id", "ad_id", "campaign_id", "ad_type", "event_type", "event_time")


class Reason(StrEnum):
    """Every reason a record is dead-lettered for (the `reason` field of a dead letter)."""

    NULL_VALUE = "null value"
    VALUE_TOO_LARGE = f"value larger than {MAX_VALUE_BYTES} bytes"
    NOT_UTF8 = "value is not valid UTF-8"
    EMPTY_LINE = "empty line"
    INVALID_JSON = "invalid JSON"
    MISSING_FIELD = "missing field(s): " + ", ".join(AD_FIELDS) + " are required"
    WRONG_TYPE = "wrong type: event_time must be an integer (epoch ms)"
    UNKNOWN_EVENT_TYPE = "unknown event_type (expected one of view, click, purchase)"
    FIELD_TOO_LONG = f"field too long: every string field is at most {MAX_FIELD_CHARS} characters"
    EVENT_TIME_OUT_OF_RANGE = "event_time out of range: must lie in years 1970-9999 (0 <= ms < 253402300800000)"
    EVENT_TIME_AHEAD = "event_time too far ahead of the record's Kafka timestamp (max_event_time_ahead_s)"
    EVENT_TIME_BEHIND = "event_time too far behind the record's Kafka timestamp (max_event_time_behind_s)"
    INVALID_PROBE = "invalid probe: keyed as a probe but not JSON with a routing_key and an integer sent_ms"


REASONS = frozenset(reason.value for reason in Reason)


Check = tuple[Column, Reason]
"""A condition that rejects a row, and the reason it is rejected for."""


def first_reason(*checks: Check) -> Column:
    """The reason of the first check that holds, else null. A check may rely on the earlier
    ones having failed (a later check only sees rows the earlier ones passed)."""
    expr = F.lit(None).cast("string")
    for condition, reason in reversed(checks):
        expr = F.when(condition, F.lit(reason.value)).otherwise(expr)
    return expr


def basic_value_checks(value: Column) -> list[Check]:
    """Checks every text record passes: present, not too large, valid UTF-8."""
    return [
        (value.isNull(), Reason.NULL_VALUE),
        (F.length(value) > MAX_VALUE_BYTES, Reason.VALUE_TOO_LARGE),
        (~F.is_valid_utf8(value), Reason.NOT_UTF8),
    ]


@once_per_jvm
def _is_good_or_rejected() -> tuple[Column, Column]:
    return F.col(REJECT).isNull(), F.col(REJECT).isNotNull()


@once_per_jvm
def _rejected_count() -> Column:
    return F.count(F.col(REJECT)).alias("rejected")


@dataclass(frozen=True)
class CountedSplit:
    """A batch's parsed rows split into the good ones, whose first job also counts the rejected
    ones (no count job of its own beside the batch's real work), and the rejected ones, built
    only when some were: every DataFrame step is analysed again on the driver in every batch."""

    parsed: DataFrame
    good: DataFrame
    observation: Observation

    def rejected(self) -> DataFrame:
        """The rejected rows (a new DataFrame at each call)."""
        return self.parsed.where(_is_good_or_rejected()[1])

    def rejected_count(self) -> int:
        """The count a job over the good rows observed; a count job only if Spark delivered none.

        Spark 4.2 now and then completes an observation with an empty row, so the observed value is
        read from the JVM row (PySpark's `get` asserts on such a row) and checked."""
        jvm_observation = self.observation._jo  # noqa: SLF001 (PySpark keeps the JVM Observation private)
        if jvm_observation is not None and jvm_observation.future().isCompleted():
            row = jvm_observation.getRow()
            if row.length() == 1 and not row.isNullAt(0):
                return int(row.getLong(0))
        return self.rejected().count()


def split_counting_rejected(parsed: DataFrame) -> CountedSplit:
    """`parsed`'s good rows, counting the rejected ones as a job computes them (`CountedSplit`)."""
    observation = Observation()
    good = parsed.observe(observation, _rejected_count()).where(_is_good_or_rejected()[0])
    return CountedSplit(parsed, good, observation)


def write_dead_letters(rejected: DataFrame, bootstrap: KafkaConnection | str, topic: str, batch_id: int) -> None:
    """Publish rejected records as JSON to the dead-letter topic."""
    payload = F.to_json(
        F.struct(
            F.col(REJECT).alias("reason"),
            F.col("topic").alias("source_topic"),
            F.col("partition").alias("source_partition"),
            F.col("offset").alias("source_offset"),
            F.lit(batch_id).alias("batch_id"),
            F.length("value").alias("value_bytes"),
            F.substring(F.col("value").cast("string"), 1, KEPT_VALUE_CHARS).alias("value_head"),
        )
    )
    write_batch(rejected, bootstrap, topic, key=source_position(), value=payload)
