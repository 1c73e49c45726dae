"""The Dagster code location loads, and the instance config it runs under is well formed."""

from __future__ import annotations

import yaml
from dagster import Definitions


def test_definitions_load():
    from orchestration.definitions import defs

    Definitions.validate_loadable(defs)
    assert defs.resolve_asset_graph().get_all_asset_keys()


def test_instance_config_limits_rescales_and_lives_under_the_run_folder(tmp_path):
    from orchestration.names import RESCALE_TAG
    from orchestration.stack.dagster_home import prepare_dagster_home
    from pipelines.settings import EspSettings
    from tests.conftest import REPO_ROOT

    settings = EspSettings(project_root=REPO_ROOT, run_dir_name=str(tmp_path / "run"))
    home = prepare_dagster_home(settings)
    config = yaml.safe_load((home / "dagster.yaml").read_text())
    assert config["storage"]["sqlite"]["base_dir"].startswith(str(tmp_path))
    limits = config["run_coordinator"]["config"]["tag_concurrency_limits"]
    assert {"key": RESCALE_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in limits
    assert config["run_monitoring"]["enabled"] is True
    assert config["run_coordinator"]["config"]["dequeue_interval_seconds"] == 1


def test_resize_runs_whose_process_died_are_failed_by_run_monitoring():
    # Without the tag, a resize run whose process died with its code server or with `dagster dev`
    # (the default run launcher has no health check) may stay STARTED and hold the stream's one
    # rescale slot for good.
    import pytest
    from pydantic import ValidationError

    from orchestration.definitions import defs
    from orchestration.elasticity.assets import LayoutConfig
    from orchestration.names import MAX_RUNTIME_TAG, RESIZE_MAX_RUNTIME_S, RESIZE_MAX_WAIT_S, resize_job_name
    from orchestration.streams.catalog import STREAMS

    for entry in STREAMS:
        job = defs.resolve_job_def(resize_job_name(entry.name))
        assert int(job.tags[MAX_RUNTIME_TAG]) == RESIZE_MAX_RUNTIME_S
    assert RESIZE_MAX_WAIT_S < RESIZE_MAX_RUNTIME_S
    with pytest.raises(ValidationError):
        LayoutConfig(target={"op": "scale_to", "channels": 2}, timeout_s=RESIZE_MAX_RUNTIME_S)


def test_instance_config_purges_old_ticks(tmp_path):
    # A sensor ticking every few seconds writes ~20,000 ticks a day; without a `retention:` block
    # the daemon keeps every one of them.
    from dagster import DagsterInstance
    from dagster._core.scheduler.instigation import InstigatorType, TickStatus

    from orchestration.stack.dagster_home import prepare_dagster_home
    from pipelines.settings import EspSettings
    from tests.conftest import REPO_ROOT

    settings = EspSettings(project_root=REPO_ROOT, run_dir_name=str(tmp_path / "run"))
    home = prepare_dagster_home(settings)
    config = yaml.safe_load((home / "dagster.yaml").read_text())
    for kind in ("schedule", "sensor"):
        assert config["retention"][kind]["purge_after_days"]["success"] == 7
    instance = DagsterInstance.from_config(str(home))
    try:
        settings_by_status = instance.get_tick_retention_settings(InstigatorType.SENSOR)
        assert settings_by_status[TickStatus.SKIPPED] == 1
        assert settings_by_status[TickStatus.SUCCESS] == 7
    finally:
        instance.dispose()


def test_short_jobs_run_their_steps_in_the_run_process_and_streams_keep_a_process_per_step():
    # A process per step (Dagster's default) costs 15–60 s per step on 2 cores: the post-rescale
    # check alone doubled a resize run's time. The stream's run keeps it: a terminated run must
    # interrupt the step's own process.
    from orchestration.definitions import defs
    from orchestration.executors import SHORT_JOB_EXECUTOR
    from orchestration.names import (
        DAILY_RECOMPUTE_JOB,
        HEALTH_JOB,
        RUN_RETENTION_JOB,
        VALIDATION_JOB,
        policy_job_name,
        resize_job_name,
        stream_job_name,
    )
    from orchestration.streams.catalog import STREAMS

    short = [DAILY_RECOMPUTE_JOB, HEALTH_JOB, RUN_RETENTION_JOB, VALIDATION_JOB]
    short += [name(entry.name) for entry in STREAMS for name in (resize_job_name, policy_job_name)]
    for name in short:
        assert defs.resolve_job_def(name).executor_def is SHORT_JOB_EXECUTOR, name
    for entry in STREAMS:
        assert defs.resolve_job_def(stream_job_name(entry.name)).executor_def is not SHORT_JOB_EXECUTOR
