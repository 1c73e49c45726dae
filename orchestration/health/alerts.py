"""Alerts: a failed stream or resize run is told, not just listed among the runs.

`make_run_failure_sensor` is a Dagster run-failure sensor watching the stream and resize jobs of
the given streams. Each failure becomes an `Alert` handed to every `AlertSink`; the default sinks
log it, append it to `<run dir>/alerts.jsonl` and record it as a materialization of the
`stream_alerts` asset (so the UI lists the alerts with their reason). Another sink (mail, chat)
is one class with a `send` method.
"""

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from dagster import (
    AssetMaterialization,
    DagsterInstance,
    DefaultSensorStatus,
    RunFailureSensorContext,
    SensorDefinition,
    run_failure_sensor,
)

from orchestration.names import (
    ALERTS_ASSET_KEY,
    RESCALE_TAG,
    RUN_FAILURE_SENSOR,
    STREAM_TAG,
    resize_job_name,
    stream_job_name,
)
from orchestration.resources import EspSettingsResource
from orchestration.streams.catalog import StreamEntry

ALERTS_FILE = "alerts.jsonl"


@dataclass(frozen=True)
class Alert:
    """One failed run, in words."""

    at: float
    stream: str
    kind: str
    """`stream` (the stream's own run) or `resize` (a rescale run)."""
    job: str
    run_id: str
    message: str


class AlertSink(Protocol):
    def send(self, alert: Alert) -> None:
        """Deliver the alert (must not raise for a delivery problem that a retry would not fix)."""
        ...


class FileSink:
    """Appends each alert as a JSON line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, alert: Alert) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            out.write(json.dumps(asdict(alert)) + "\n")


class AssetSink:
    """Records the alert as a materialization of `stream_alerts` (the UI's list of alerts)."""

    def __init__(self, instance: DagsterInstance) -> None:
        self.instance = instance

    def send(self, alert: Alert) -> None:
        metadata = {k: v for k, v in asdict(alert).items() if k != "at"}
        self.instance.report_runless_asset_event(AssetMaterialization(asset_key=ALERTS_ASSET_KEY, metadata=metadata))


def read_alerts(run_dir: Path) -> list[Alert]:
    """The alerts recorded so far, oldest first."""
    path = Path(run_dir) / ALERTS_FILE
    if not path.is_file():
        return []
    return [Alert(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def watched_jobs(entries: Sequence[StreamEntry]) -> dict[str, tuple[str, str]]:
    """Job name -> (stream, kind) of every job whose failure is an alert."""
    jobs = {stream_job_name(e.name): (e.name, "stream") for e in entries}
    return {**jobs, **{resize_job_name(e.name): (e.name, "resize") for e in entries}}


def alert_for(job: str, run_id: str, tags: dict[str, str], message: str, at: float, entries) -> Alert | None:
    """The alert of a failed run, or None when the run is none of the watched ones."""
    stream, kind = watched_jobs(entries).get(job, (tags.get(RESCALE_TAG) or tags.get(STREAM_TAG), None))
    if kind is None:
        return None
    return Alert(at=at, stream=str(stream), kind=kind, job=job, run_id=run_id, message=message)


def failure_message(context: RunFailureSensorContext) -> str:
    """The run's failure message, with the first failed step's error (the reason a person wants)."""
    parts = [context.failure_event.message or "the run failed"]
    for event in context.get_step_failure_events()[:1]:
        error = event.step_failure_data.error if event.step_failure_data else None
        if error is not None:
            parts.append(error.message.strip())
    return ": ".join(parts)


def make_run_failure_sensor(entries: Sequence[StreamEntry], extra_sinks: Sequence[AlertSink] = ()) -> SensorDefinition:
    @run_failure_sensor(
        name=RUN_FAILURE_SENSOR,
        description="Alerts on a failed stream or resize run: logged, appended to <run dir>/alerts.jsonl, "
        "and recorded as a materialization of stream_alerts.",
        default_status=DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=5,
    )
    def stream_run_failure_alerts(context: RunFailureSensorContext, esp_settings: EspSettingsResource) -> None:
        run = context.dagster_run
        alert = alert_for(run.job_name, run.run_id, dict(run.tags), failure_message(context), time.time(), entries)
        if alert is None:
            return
        context.log.error("ALERT %s run %s of %s failed: %s", alert.kind, run.run_id[:8], alert.stream, alert.message)
        sinks = [FileSink(esp_settings.load().run_dir / ALERTS_FILE), AssetSink(context.instance), *extra_sinks]
        for sink in sinks:
            sink.send(alert)

    return stream_run_failure_alerts
