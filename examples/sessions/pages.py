"""A two-stage elastic job: clicks are sessionized per user (stage `main`), then every closed
session's clicks are added up per landing page (stage `pages`, keyed by the page), in the same
micro-batch. Each stage has its own channels, state and rescale requests
(`esp stream rescale --stage pages`). A stream runs it with `job = "examples.sessions.pages:pages_job"`.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from examples.sessions.job import ALLOWED_LATENESS_MS, GAP_MS, parse_clicks
from examples.sessions.operator import EVENT_TIME, Sessionize
from pipelines import api

PAGES_STAGE = "pages"


def sessions_by_page(sessions: DataFrame) -> DataFrame:
    """Closed sessions (stage `main`'s output) → the `pages` stage's input: landing page and clicks."""
    return sessions.select("landing_page", "clicks")


def page_totals(totals: DataFrame) -> DataFrame:
    """The `pages` stage's output → result rows: each landing page's clicks in closed sessions so far."""
    return totals.selectExpr("landing_page", "value AS clicks", "channel", "batch_id")


def pages_job() -> api.Job:
    """The job a stream runs (`examples.sessions.pages:pages_job`)."""
    return api.Job(
        parse=parse_clicks,
        operator=Sessionize(gap_ms=GAP_MS),
        event_time_column=EVENT_TIME,
        allowed_lateness_ms=ALLOWED_LATENESS_MS,
        stages=(
            api.Stage(
                name=PAGES_STAGE,
                operator=api.KeyedAggregate(api.IntSum(), value_column="clicks", key_column="landing_page"),
                rekey=sessions_by_page,
            ),
        ),
        result_key_columns=("landing_page",),
        results=page_totals,
    )
