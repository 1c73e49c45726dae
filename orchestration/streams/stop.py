"""Stopping a stream from the UI: `<stream>_stop_job` holds the supervisor, then ends the stream's run.

Terminating the stream's run alone is not a stop: its supervisor starts a new run at its next
tick. The stop job first leaves a marker `stopped.json` in the stream's control folder (the
supervisor skips while it is there, saying why), then terminates the active run through the
instance's run coordinator, as the UI's Terminate button does: the run's query stops at a batch
boundary. Launching `<stream>_stream_job` again removes the marker (the start from the UI).
"""

import json
import time
from dataclasses import dataclass
from os import PathLike, fspath

from dagster import Config, DagsterRunStatus, Failure, JobDefinition, OpExecutionContext, RunsFilter, job, op
from pydantic import Field

from elasticity.state import Location, uris
from orchestration.names import KIND_TAG, stop_job_name, stream_job_name
from orchestration.resources import EspSettingsResource
from orchestration.runs import ACTIVE_RUN_STATUSES
from orchestration.streams.catalog import StreamEntry, stream_spec

STOP_MARKER = "stopped.json"


@dataclass(frozen=True)
class StopMarker:
    """Who stopped the stream, when, and why."""

    run_id: str
    at: float
    note: str


def stop_marker_path(control_dir: str | PathLike[str]) -> str:
    return uris.join(control_dir, STOP_MARKER)


def write_stop_marker(control_dir: str | PathLike[str], marker: StopMarker) -> None:
    document = json.dumps({"run_id": marker.run_id, "at": marker.at, "note": marker.note}).encode()
    Location.of(fspath(control_dir)).publish_bytes(STOP_MARKER, document, sealed=False)


def read_stop_marker(control_dir: str | PathLike[str]) -> StopMarker | None:
    folder = Location.of(fspath(control_dir))
    if (stored := folder.read_document(STOP_MARKER)) is None:
        return None
    try:
        data = json.loads(stored)
        return StopMarker(str(data["run_id"]), float(data["at"]), str(data.get("note", "")))
    except (ValueError, KeyError, TypeError):
        return StopMarker("unknown", folder.modified_s(STOP_MARKER) or time.time(), "unreadable stop marker")


def clear_stop_marker(control_dir: str | PathLike[str]) -> bool:
    """Remove the marker (a start by hand); True if there was one."""
    folder = Location.of(fspath(control_dir))
    existed = folder.exists(STOP_MARKER)
    folder.delete_file(STOP_MARKER)
    return existed


class StopStreamConfig(Config):
    """How to stop the stream."""

    note: str = Field("stopped from the UI", description="Why (the supervisor's skip reason repeats it).")
    timeout_s: float = Field(180.0, gt=0, description="How long to wait for the stream's run to end.")


def make_stop_job(entry: StreamEntry) -> JobDefinition:
    @op(name=f"stop_{entry.name}_stream")
    def stop_stream(context: OpExecutionContext, config: StopStreamConfig, esp_settings: EspSettingsResource) -> None:
        control_dir = stream_spec(esp_settings.load(), entry).control_dir
        write_stop_marker(control_dir, StopMarker(context.run_id, time.time(), config.note))
        context.log.info("supervisor of %s held (%s)", entry.name, stop_marker_path(control_dir))
        filters = RunsFilter(job_name=stream_job_name(entry.name), statuses=ACTIVE_RUN_STATUSES)
        runs = context.instance.get_runs(filters=filters)
        for run in runs:
            context.log.info("terminating run %s of %s", run.run_id[:8], entry.name)
            context.instance.run_coordinator.cancel_run(run.run_id)
        deadline = time.monotonic() + config.timeout_s
        for run in runs:
            while (status := _status(context, run.run_id)) in (*ACTIVE_RUN_STATUSES, DagsterRunStatus.CANCELING):
                if time.monotonic() > deadline:
                    raise Failure(f"run {run.run_id[:8]} of {entry.name} is still {status.value}")
                time.sleep(1)
            context.log.info("run %s of %s ended %s", run.run_id[:8], entry.name, status.value)
        if not runs:
            context.log.info("%s had no active run; it stays stopped", entry.name)

    @job(
        name=stop_job_name(entry.name),
        description=f"Stop the {entry.name} stream: hold its supervisor, end its run at a batch boundary.",
        tags={KIND_TAG: "stop"},
    )
    def stop_job():
        stop_stream()

    return stop_job


def _status(context: OpExecutionContext, run_id: str) -> DagsterRunStatus:
    run = context.instance.get_run_by_id(run_id)
    return DagsterRunStatus.CANCELED if run is None else run.status
