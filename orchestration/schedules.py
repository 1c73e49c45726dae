"""Schedules shared by the domains: a job at a fixed UTC time, running from the start."""

from dagster import DefaultScheduleStatus, ScheduleDefinition


def utc_schedule(name: str, job, cron: str, description: str) -> ScheduleDefinition:
    """`job` on `cron` (UTC), on by default (a fresh instance runs it without a click in the UI)."""
    return ScheduleDefinition(
        name=name,
        job=job,
        cron_schedule=cron,
        execution_timezone="UTC",
        default_status=DefaultScheduleStatus.RUNNING,
        description=description,
    )
