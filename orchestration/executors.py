"""The executor of esp's short jobs: rescales, policy changes, checks, backfills and dashboards."""

from __future__ import annotations

from dagster import ExecutorDefinition, in_process_executor

SHORT_JOB_EXECUTOR: ExecutorDefinition = in_process_executor
"""Their steps run one after the other inside the run's own process. Dagster's default executor
starts a Python process per step (and with it a Spark session per Spark step): 15–60 s each on a
2-core machine, more than the step itself, and paid again by the post-rescale check; a rescale
asked by the sensor would reach the stream that much later. The long-running stream jobs keep the
default, so a terminated run interrupts its step process."""
