"""The clickstream sessionization job, declared for esp: how click records parse, which operator
sessionizes them, what its results are keyed by, and the per-page summary over its results.

Input records are JSON: {"user_id": str, "page": str, "event_time": epoch ms}. A stream runs it
with `job = "examples.sessions.job:sessions_job"` (see docs/operators.md, "Your first elastic job").
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from examples.sessions.operator import EVENT_TIME, PAGE, USER, Sessionize
from pipelines import api

CLICK_SCHEMA = f"{USER} STRING, {PAGE} STRING, {EVENT_TIME} BIGINT"
NOT_A_CLICK = "not a click: JSON with string user_id and page and an integer event_time (epoch ms) expected"
GAP_MS = 30_000
"""A session ends after 30 s of event time without a click."""
ALLOWED_LATENESS_MS = 60_000
"""Clicks may arrive up to a minute behind the latest event time seen."""


def parse_clicks(raw: DataFrame) -> DataFrame:
    """Kafka rows → the same rows with user_id, page, event_time and a reject reason."""
    click = F.from_json(F.col("value").cast("string"), CLICK_SCHEMA)
    parsed = raw.withColumn("_click", click).select(
        "*", *(F.col(f"_click.{c}").alias(c) for c in (USER, PAGE, EVENT_TIME))
    )
    incomplete = F.col(PAGE).isNull() | F.col(EVENT_TIME).isNull()
    return parsed.drop("_click").withColumn(api.REJECT, F.when(incomplete, F.lit(NOT_A_CLICK)))


def sessions_job() -> api.Job:
    """The job a stream runs (`examples.sessions.job:sessions_job`)."""
    return api.Job(
        parse=parse_clicks,
        operator=Sessionize(gap_ms=GAP_MS),
        result_key_columns=(USER, "session_start_ms"),
        event_time_column=EVENT_TIME,
        allowed_lateness_ms=ALLOWED_LATENESS_MS,
        expectations=session_expectations,
        archive=archive_clicks,
        recompute=api.Recompute(
            results=recompute_sessions,
            day_column="session_start_ms",
            compared_columns=("landing_page", "session_end_ms", "clicks"),
        ),
    )


def archive_clicks(good: DataFrame) -> DataFrame:
    """Clicks as archived for the daily backfill: dated by when they happened (event time), so a
    day's sessions are recomputed from that day's clicks (and its neighbours')."""
    day = F.date_format(F.timestamp_millis(EVENT_TIME), "yyyy-MM-dd")
    return good.select(USER, PAGE, EVENT_TIME, "topic", "partition", "offset").withColumn("date", day)


def recompute_sessions(clicks: DataFrame) -> DataFrame:
    """Archived clicks → the sessions they form, in batch: each user's clicks in (event time, page)
    order, split where the time since the previous click exceeds the gap. The stream emits the same
    sessions once the watermark passes them; clicks it rejected as late are counted here, so a
    day with late clicks does not reconcile (by design: the stream left them out)."""
    in_order = Window.partitionBy(USER).orderBy(EVENT_TIME, PAGE)
    since_previous = F.col(EVENT_TIME) - F.lag(EVENT_TIME).over(in_order)
    starts = F.when(since_previous.isNull() | (since_previous > GAP_MS), 1).otherwise(0)
    session_number = F.sum("_starts").over(in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow))
    numbered = clicks.withColumn("_starts", starts).withColumn("_session", session_number)
    return numbered.groupBy(USER, "_session").agg(
        F.min(EVENT_TIME).alias("session_start_ms"),
        F.max(EVENT_TIME).alias("session_end_ms"),
        F.count(F.lit(1)).alias("clicks"),
        F.min(F.struct(EVENT_TIME, PAGE))[PAGE].alias("landing_page"),
    )


def session_expectations() -> list:
    """What every emitted session satisfies (checked by the stream's generated GX suite)."""
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnValuesToNotBeNull(column="landing_page"),
        gxe.ExpectColumnValuesToBeBetween(column="clicks", min_value=1),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="session_end_ms", column_B="session_start_ms", or_equal=True
        ),
    ]


def page_summary(sessions: DataFrame) -> DataFrame:
    """Closed sessions → per landing page: the number of sessions and their mean duration (ms)."""
    duration = F.col("session_end_ms") - F.col("session_start_ms")
    return sessions.groupBy("landing_page").agg(
        F.count(F.lit(1)).alias("sessions"), F.avg(duration).alias("mean_duration_ms")
    )
