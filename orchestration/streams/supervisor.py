"""Supervisor sensors: keep each stream's run alive, restarting it after a failure with backoff.

The cursor remembers consecutive failures; the wait doubles with each (capped), and every tick
says why it started a run or why it did not. A STARTED run whose driver stopped beating (its
process was killed, or the code server that launched it died) is marked failed here, since the
default run launcher never notices; the next ticks restart it like any failed run. A stream
stopped by `<stream>_stop_job` (its marker in the control folder) is left stopped.
"""

import json
import time

from dagster import (
    DagsterRunStatus,
    RunRecord,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from orchestration.names import RESTART_REASON_TAG, STREAM_TAG, supervisor_sensor_name
from orchestration.resources import EspSettingsResource
from orchestration.runs import ACTIVE_RUN_STATUSES
from orchestration.streams.catalog import StreamEntry, stream_spec

BASE_BACKOFF_S = 15.0
MAX_BACKOFF_S = 600.0
# A run's driver starts beating once its Spark session is up: allow that long after the run starts.
START_GRACE_S = 180.0
# Beats come every 5 s; this many seconds without one means the driver is gone or hung.
STALE_AFTER_S = 60.0


def backoff_s(failures: int) -> float:
    return 0.0 if failures == 0 else min(MAX_BACKOFF_S, BASE_BACKOFF_S * 2 ** (failures - 1))


def make_supervisor(entry: StreamEntry, job_name: str) -> SensorDefinition:
    @sensor(
        name=supervisor_sensor_name(entry.name),
        job_name=job_name,
        minimum_interval_seconds=15,
        description=f"Starts the {entry.name} stream if it is not running; restarts it after a failure with backoff.",
    )
    def supervisor(context: SensorEvaluationContext, esp_settings: EspSettingsResource):
        from orchestration.streams.stop import read_stop_marker

        records = context.instance.get_run_records(filters=RunsFilter(job_name=job_name), limit=5)
        runs = [record.dagster_run for record in records]
        active = [r for r in records if r.dagster_run.status in ACTIVE_RUN_STATUSES]
        if active:
            run = active[0].dagster_run
            control_dir = stream_spec(esp_settings.load(), entry).control_dir
            dead = dead_run_reason(active[0], control_dir, time.time())
            if dead is None:
                return SkipReason(f"{entry.name} is running (run {run.run_id[:8]}, {run.status.value})")
            context.instance.report_run_failed(run, f"the stream's driver is gone: {dead}")
            return SkipReason(f"run {run.run_id[:8]} of {entry.name} marked failed ({dead}); a restart follows")
        stopped = read_stop_marker(stream_spec(esp_settings.load(), entry).control_dir)
        if stopped is not None:
            at = time.strftime("%H:%M:%S", time.localtime(stopped.at))
            return SkipReason(
                f"{entry.name} was stopped at {at} by run {stopped.run_id[:8]} ({stopped.note}); "
                f"launch {job_name} to start it again"
            )
        state = json.loads(context.cursor) if context.cursor else {"failures": 0, "seen": None}
        last = runs[0] if runs else None
        if last is not None and last.run_id != state.get("seen"):
            state["failures"] = state["failures"] + 1 if last.status == DagsterRunStatus.FAILURE else 0
            state["seen"] = last.run_id
            state["ended_at"] = time.time()
        wait = backoff_s(state["failures"]) - (time.time() - state.get("ended_at", 0.0))
        context.update_cursor(json.dumps(state))
        if wait > 0:
            return SkipReason(
                f"last {entry.name} run {last.run_id[:8]} failed ({state['failures']} in a row); "
                f"restarting in {wait:.0f}s"
            )
        reason = "first start" if last is None else f"previous run {last.run_id[:8]} ended {last.status.value}"
        return RunRequest(tags={STREAM_TAG: entry.name, RESTART_REASON_TAG: reason})

    return supervisor


def dead_run_reason(record: RunRecord, control_dir: str, now: float) -> str | None:
    """Why a STARTED stream run must be taken for dead (None: alive, or too young to judge)."""
    from pipelines.streams.heartbeat import read_heartbeat, why_dead

    run = record.dagster_run
    started = record.start_time
    if run.status != DagsterRunStatus.STARTED or started is None or now - started < START_GRACE_S:
        return None
    beat = read_heartbeat(control_dir)
    if beat is not None and beat.at < started:
        beat = None  # a previous run's last beat says nothing about this one
    return why_dead(beat, now, STALE_AFTER_S)
