"""Ad-click analytics (the shape of the Yahoo streaming benchmark): JSON ad events → per-campaign
view counts in event-time tumbling windows, with a watermark.

An event is *late* when its window has already closed: window end ≤ the watermark in force for
the batch (max event time of earlier batches minus the allowed lateness). Late events are not
added to the counts; they are counted per window and written to a `late` table, so that
`counted + late` always equals the whole valid input.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipelines.dead_letters import REJECT, basic_value_checks, first_reason
from pipelines.probes import is_probe

EVENT_TYPES = ("view", "click", "purchase")
STRING_FIELDS = ("event_id", "user_id", "page_id", "ad_id", "campaign_id", "ad_type", "event_type")
EVENT_SCHEMA = T.StructType([T.StructField(f, T.StringType()) for f in (*STRING_FIELDS, "event_time")])
KEY_SEPARATOR = "|"


def parse_events(raw: DataFrame) -> DataFrame:
    """Kafka rows (probes excluded) with typed event columns and `reject_reason`."""
    text = F.col("value").cast("string")
    parsed = raw.where(~is_probe()).withColumn("event", F.from_json(text, EVENT_SCHEMA))
    event_time = F.expr("try_cast(event.event_time AS BIGINT)")
    missing = [F.col(f"event.{f}").isNull() for f in (*STRING_FIELDS, "event_time")]
    reason = first_reason(
        *basic_value_checks(F.col("value")),
        (F.get_json_object(text, "$").isNull(), "invalid JSON"),
        (_any(missing), "missing field(s): " + ", ".join((*STRING_FIELDS, "event_time")) + " are required"),
        (event_time.isNull(), "wrong type: event_time must be an integer (epoch ms)"),
        (
            ~F.col("event.event_type").isin(*EVENT_TYPES),
            f"unknown event_type (expected one of {', '.join(EVENT_TYPES)})",
        ),
    )
    columns = [F.col(f"event.{f}").alias(f) for f in STRING_FIELDS]
    return parsed.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        *columns,
        event_time.alias("event_time"),
        reason.alias(REJECT),
    )


def _any(conditions: list[Column]) -> Column:
    result = conditions[0]
    for condition in conditions[1:]:
        result = result | condition
    return result


def with_window(events: DataFrame, window_seconds: int) -> DataFrame:
    size = window_seconds * 1000
    start = F.floor(F.col("event_time") / size) * size
    return events.withColumn("window_start_ms", start.cast("long")).withColumn(
        "window_end_ms", (start + size).cast("long")
    )


def view_window_counts(events: DataFrame, window_seconds: int) -> DataFrame:
    """(campaign_id, window_start_ms, window_end_ms, n) over view events."""
    views = with_window(events.where(F.col("event_type") == "view"), window_seconds)
    return views.groupBy("campaign_id", "window_start_ms", "window_end_ms").agg(F.count(F.lit(1)).alias("n"))


def split_late(counts: DataFrame, watermark_ms: int | None) -> tuple[DataFrame, DataFrame]:
    """(on time, late) window counts under a watermark (None: nothing is late yet)."""
    if watermark_ms is None:
        return counts, counts.limit(0)
    late = F.col("window_end_ms") <= F.lit(watermark_ms)
    return counts.where(~late), counts.where(late)


def state_key(counts: DataFrame) -> DataFrame:
    """Window counts as keyed deltas for the elastic stage: key = campaign|window_start_ms."""
    key = F.concat_ws(KEY_SEPARATOR, F.col("campaign_id"), F.col("window_start_ms").cast("string"))
    return counts.select(key.alias("key"), F.col("n"))


def result_columns(results: DataFrame, window_seconds: int) -> DataFrame:
    """(key, count, channel, batch_id) → campaign_id, window_start, window_end, count, channel, batch_id."""
    parts = F.split(F.col("key"), r"\|")
    start_ms = parts.getItem(1).cast("long")
    return results.select(
        parts.getItem(0).alias("campaign_id"),
        F.timestamp_millis(start_ms).alias("window_start"),
        F.timestamp_millis(start_ms + window_seconds * 1000).alias("window_end"),
        F.col("count"),
        F.col("channel"),
        F.col("batch_id"),
    )


def batch_oracle(raw: DataFrame, window_seconds: int) -> dict[tuple[str, int], int]:
    """View counts per (campaign, window start ms) of every valid event, late or not."""
    good = parse_events(raw).where(F.col(REJECT).isNull())
    return {(r.campaign_id, r.window_start_ms): r.n for r in view_window_counts(good, window_seconds).collect()}
