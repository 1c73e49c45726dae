"""What the backfill and quality domains point at: the batch pipelines (the built-in ones and
those of user streams with a `Recompute`), their streams' folders and the daily partitions (the
asset keys of the tables involved are in `orchestration.names`). No Dagster definitions here."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from dagster import DailyPartitionsDefinition

from elasticity.state import uris
from orchestration.streams.catalog import StreamEntry, catalog_streams, is_user_stream, stream_root, stream_spec
from pipelines.api import load_job
from pipelines.batch.job_pipeline import job_pipeline
from pipelines.batch.pipelines import BATCH_PIPELINES, BatchPipeline
from pipelines.settings import EspSettings
from pipelines.streams.spec import StreamSpec

PARTITIONS_START = "2025-01-01"
"""The first day a daily partition exists for (earlier days are refused, not silently empty)."""

DAILY_PARTITIONS = DailyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC", end_offset=1)
"""One partition per UTC day, today included (a partial day can be recomputed again later;
reconciliation only looks at closed days and the nightly schedule targets yesterday)."""


@dataclass(frozen=True)
class BatchTarget:
    """A stream with a daily backfill: its name and how to get its batch pipeline. A user stream's
    pipeline comes from its job, imported when a run needs it, not when the code location loads
    (a broken job module fails its own stream's runs only)."""

    name: str
    pipeline: Callable[[], BatchPipeline]


def targets() -> list[BatchTarget]:
    """The built-in pipelines, then every declared user stream."""
    built_in = [BatchTarget(p.name, (lambda p=p: p)) for p in BATCH_PIPELINES.values()]
    return built_in + [user_target(e) for e in user_entries()]


def user_target(entry: StreamEntry) -> BatchTarget:
    """A user stream's batch target: its job's `Recompute`, imported when a run needs it."""
    return BatchTarget(entry.name, lambda: job_pipeline(entry.name, load_job(entry.job)))


def user_entries() -> list[StreamEntry]:
    return [e for e in catalog_streams() if is_user_stream(e)]


def pipelines() -> list[BatchPipeline]:
    """The built-in batch pipelines."""
    return list(BATCH_PIPELINES.values())


def batch_pipeline(name: str) -> BatchPipeline:
    """The batch pipeline of stream `name`, or ValueError saying which streams have one."""
    every = targets()
    target = next((t for t in every if t.name == name), None)
    if target is None:
        known = ", ".join(sorted(t.name for t in every))
        raise ValueError(f"unknown pipeline {name!r}; known pipelines: {known}")
    return target.pipeline()


def spec_for(settings: EspSettings, name: str, root: str | None = None) -> StreamSpec:
    """Stream `name`'s spec (with its catalogued options if it is catalogued), optionally with its
    folder replaced."""
    entry = next((e for e in catalog_streams() if e.name == name), None)
    folder = root or stream_root(settings, name)
    if entry is not None:
        return stream_spec(settings, entry).model_copy(update={"root": uris.canonical(folder)})
    return StreamSpec(
        name=name,
        job=name,
        root=folder,
        bootstrap_servers=settings.kafka.bootstrap_servers,
        kafka_security=settings.kafka.security,
    )


def is_catalogued(name: str) -> bool:
    return any(e.name == name for e in catalog_streams())


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()
