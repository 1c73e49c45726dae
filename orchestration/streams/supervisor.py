"""Supervisor sensors: keep each stream's run alive, restarting it after a failure with backoff.

The cursor remembers consecutive failures; the wait doubles with each (capped), and every tick
says why it started a run or why it did not.
"""

import json
import time

from dagster import (
    DagsterRunStatus,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from orchestration.names import RESTART_REASON_TAG, STREAM_TAG, supervisor_sensor_name
from orchestration.runs import ACTIVE_RUN_STATUSES
from orchestration.streams.catalog import StreamEntry

BASE_BACKOFF_S = 15.0
MAX_BACKOFF_S = 600.0


def backoff_s(failures: int) -> float:
    return 0.0 if failures == 0 else min(MAX_BACKOFF_S, BASE_BACKOFF_S * 2 ** (failures - 1))


def make_supervisor(entry: StreamEntry, job_name: str) -> SensorDefinition:
    @sensor(
        name=supervisor_sensor_name(entry.name),
        job_name=job_name,
        minimum_interval_seconds=15,
        description=f"Starts the {entry.name} stream if it is not running; restarts it after a failure with backoff.",
    )
    def supervisor(context: SensorEvaluationContext):
        runs = context.instance.get_runs(filters=RunsFilter(job_name=job_name), limit=5)
        active = [r for r in runs if r.status in ACTIVE_RUN_STATUSES]
        if active:
            return SkipReason(f"{entry.name} is running (run {active[0].run_id[:8]}, {active[0].status.value})")
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
