"""What the backfill and quality domains point at: the pipelines, their streams' folders and the
daily partitions (the asset keys of the tables involved are in `orchestration.names`). No Dagster
definitions here."""

from __future__ import annotations

import datetime as dt

from dagster import DailyPartitionsDefinition

from elasticity.state import uris
from orchestration.streams.catalog import STREAMS, stream_root, stream_spec
from pipelines.batch.pipelines import BATCH_PIPELINES, BatchPipeline
from pipelines.settings import EspSettings
from pipelines.streams.spec import StreamSpec

PARTITIONS_START = "2025-01-01"
"""The first day a daily partition exists for (earlier days are refused, not silently empty)."""

DAILY_PARTITIONS = DailyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC", end_offset=1)
"""One partition per UTC day, today included (a partial day can be recomputed again later;
reconciliation only looks at closed days and the nightly schedule targets yesterday)."""


def pipelines() -> list[BatchPipeline]:
    return list(BATCH_PIPELINES.values())


def spec_for(settings: EspSettings, pipeline: BatchPipeline, root: str | None = None) -> StreamSpec:
    """The pipeline's stream spec (catalogued options if the stream is catalogued), optionally
    with its folder replaced."""
    entry = next((e for e in STREAMS if e.name == pipeline.name), None)
    folder = root or str(stream_root(settings, pipeline.name))
    if entry is not None:
        return stream_spec(settings, entry).model_copy(update={"root": uris.canonical(folder)})
    return StreamSpec(
        name=pipeline.name,
        job=pipeline.name,
        root=folder,
        bootstrap_servers=settings.kafka.bootstrap_servers,
        kafka_security=settings.kafka.security,
    )


def is_catalogued(pipeline: BatchPipeline) -> bool:
    return any(e.name == pipeline.name for e in STREAMS)


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()
