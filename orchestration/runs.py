"""Run statuses that several definitions test against, defined once."""

from __future__ import annotations

from dagster import DagsterRunStatus

ACTIVE_RUN_STATUSES: tuple[DagsterRunStatus, ...] = (
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
)
"""A run that is waiting or running, i.e. not yet ended: the stream's run that owns the query,
a rescale run in flight. (CANCELING is left out: the run is on its way to an end.)"""
