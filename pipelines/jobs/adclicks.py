"""Ad-click analytics (the shape of the Yahoo streaming benchmark): JSON ad events → per-campaign
view counts in event-time tumbling windows, with a watermark.

Every event passes the parser's checks or reaches the dead-letter topic with one of
`pipelines.dead_letters.Reason`: string fields are at most MAX_FIELD_CHARS characters (they
become state keys and result records), and `event_time` lies in Spark's timestamp range and
within `EventTimeBounds` of the record's Kafka timestamp, so one event far in the future can
neither overflow a batch nor move the watermark past every later event.

An event is *late* when its window has already closed: window end ≤ the watermark in force for
the batch (max event time of earlier batches minus the allowed lateness). Late events are not
added to the counts; they are counted per window and written to a `late` table, so that
`counted + late` always equals the whole valid input.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipelines import api
from pipelines.dead_letters import (
    AD_FIELDS,
    MAX_EPOCH_MS,
    MAX_FIELD_CHARS,
    REJECT,
    Reason,
    basic_value_checks,
    first_reason,
)
from pipelines.jobs.keys import SEPARATOR
from pipelines.probes import invalid_probe_check, without_valid_probes
from pipelines.streams.spec import StreamSpec

EVENT_TYPES = ("view", "click", "purchase")
STRING_FIELDS = AD_FIELDS[:-1]
EVENT_SCHEMA = T.StructType([T.StructField(f, T.StringType()) for f in AD_FIELDS])


@dataclass(frozen=True)
class EventTimeBounds:
    """How far an event's time may lie from its record's Kafka timestamp (ms), each way."""

    ahead_ms: int
    behind_ms: int

    @classmethod
    def of(cls, spec: StreamSpec) -> EventTimeBounds:
        return cls(spec.max_event_time_ahead_s * 1000, spec.max_event_time_behind_s * 1000)


def parse_events(raw: DataFrame, bounds: EventTimeBounds) -> DataFrame:
    """Kafka rows (valid probes excluded) with typed event columns and `reject_reason`."""
    text = F.col("value").cast("string")
    parsed = without_valid_probes(raw).withColumn("event", F.from_json(text, EVENT_SCHEMA))
    event_time = F.expr("try_cast(event.event_time AS BIGINT)")
    record_ms = F.unix_millis(F.col("timestamp"))
    missing = [F.col(f"event.{f}").isNull() for f in AD_FIELDS]
    too_long = [F.length(F.col(f"event.{f}")) > MAX_FIELD_CHARS for f in STRING_FIELDS]
    # Checks in order: each one only sees rows every earlier one passed (no overflow below).
    reason = first_reason(
        invalid_probe_check(),
        *basic_value_checks(F.col("value")),
        (F.get_json_object(text, "$").isNull(), Reason.INVALID_JSON),
        (_any(missing), Reason.MISSING_FIELD),
        (event_time.isNull(), Reason.WRONG_TYPE),
        (_any(too_long), Reason.FIELD_TOO_LONG),
        (~F.col("event.event_type").isin(*EVENT_TYPES), Reason.UNKNOWN_EVENT_TYPE),
        (~event_time.between(0, MAX_EPOCH_MS - 1), Reason.EVENT_TIME_OUT_OF_RANGE),
        (event_time > record_ms + F.lit(bounds.ahead_ms), Reason.EVENT_TIME_AHEAD),
        (event_time < record_ms - F.lit(bounds.behind_ms), Reason.EVENT_TIME_BEHIND),
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
    """Window counts as keyed deltas for the elastic stage: key = `keys.window_key`."""
    key = F.concat(F.col("campaign_id"), F.lit(SEPARATOR), F.col("window_start_ms").cast("string"))
    return counts.select(key.alias("key"), F.col("n"))


def result_columns(results: DataFrame, window_seconds: int) -> DataFrame:
    """(key, count, channel, batch_id) → campaign_id, window_start, window_end, count, channel, batch_id.

    The key splits at its last separator (`keys.split_window_key`): a campaign id may hold it."""
    start_text = F.substring_index(F.col("key"), SEPARATOR, -1)
    campaign = F.expr(f"left(key, char_length(key) - char_length(substring_index(key, '{SEPARATOR}', -1)) - 1)")
    start_ms = start_text.cast("long")
    return results.select(
        campaign.alias("campaign_id"),
        F.timestamp_millis(start_ms).alias("window_start"),
        F.timestamp_millis(start_ms + window_seconds * 1000).alias("window_end"),
        F.col("count"),
        F.col("channel"),
        F.col("batch_id"),
    )


def batch_oracle(
    raw: DataFrame, window_seconds: int, bounds: EventTimeBounds | None = None
) -> dict[tuple[str, int], int]:
    """View counts per (campaign, window start ms) of every valid event, late or not (event
    time bounds: the stream spec's defaults unless given)."""
    good = parse_events(raw, bounds or EventTimeBounds.of(StreamSpec())).where(F.col(REJECT).isNull())
    return {(r.campaign_id, r.window_start_ms): r.n for r in view_window_counts(good, window_seconds).collect()}


def adclicks_job(spec: StreamSpec) -> api.Job:
    """The ad-click analytics on the public job API: view counts per (campaign, window) computed in
    the JVM per batch, windows already closed under the batch's watermark set aside as late, the
    on-time ones added to each window's running count by the built-in `IntSum` aggregate."""
    bounds, window_seconds = EventTimeBounds.of(spec), spec.window_seconds

    def parse(raw: DataFrame) -> DataFrame:
        return parse_events(raw, bounds)

    def prepare(good: DataFrame, times: api.BatchTimes) -> api.Prepared:
        watermark = None if times.watermark_ms == api.NO_WATERMARK_MS else times.watermark_ms
        on_time, late = split_late(view_window_counts(good, window_seconds), watermark)
        return api.Prepared(state_key(on_time), late)

    def results(out: DataFrame) -> DataFrame:
        rows = out.select("key", F.col("value").alias("count"), "channel", "batch_id")
        return result_columns(rows, window_seconds)

    def bronze(good: DataFrame) -> DataFrame:
        columns = [*STRING_FIELDS, "event_time", "topic", "partition", "offset", "timestamp"]
        return good.select(*columns, F.date_format(F.timestamp_millis("event_time"), "yyyy-MM-dd").alias("date"))

    return api.Job(
        parse=parse,
        operator=api.KeyedAggregate(api.IntSum(), value_column="n"),
        result_key_columns=("campaign_id", "window_start"),
        event_time_column="event_time",
        allowed_lateness_ms=spec.watermark_seconds * 1000,
        prepare=prepare,
        results=results,
        weight_column="n",
        archive=bronze,
    )
