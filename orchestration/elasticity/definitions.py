"""Definitions of the elasticity domain: per catalogued stream, a resizing asset and its job per elastic
stage of its job, its sensor, and the policy asset with the job that changes it from the UI.

`elasticity_definitions(...)` builds them for any stream entries, interval and default policy
(tests and other code locations call it with their own); `defs` is the code location's set.
"""

from collections.abc import Callable, Sequence
from typing import Any

from dagster import AssetsDefinition, DefaultSensorStatus, Definitions, define_asset_job

from orchestration.elasticity.assets import make_layout_asset
from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.elasticity.policy_asset import make_policy_asset
from orchestration.elasticity.sensor import DEFAULT_INTERVAL_S, make_elasticity_sensor
from orchestration.elasticity.stages_sensor import make_stages_sensor
from orchestration.executors import SHORT_JOB_EXECUTOR
from orchestration.names import (
    MAX_RUNTIME_TAG,
    RESCALE_TAG,
    RESIZE_MAX_RUNTIME_S,
    policy_job_name,
    rescale_tag_value,
    resize_job_name,
)
from orchestration.streams.catalog import StreamEntry, catalog_streams, entry_policy, entry_stages


def elasticity_definitions(
    entries: Sequence[StreamEntry] | None = None,
    interval_s: int = DEFAULT_INTERVAL_S,
    policy: ElasticityPolicy | None = None,
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
    source: Callable[..., object] | None = None,
) -> Definitions:
    """`entries` default to the catalog's streams; `source` replaces the real Kafka metrics source of
    the sensors (tests; see make_elasticity_sensor)."""
    assets, jobs, sensors = [], [], []
    # The policy the sensors fall back on, and the one a policy change is validated against.
    default = policy or ElasticityPolicy(sample_period_s=float(interval_s))
    for entry in catalog_streams() if entries is None else entries:
        stream_default = entry_policy(entry, default)
        stages = entry_stages(entry)
        resizing = [_resizing(entry, stage) for stage in stages]
        policy_asset = make_policy_asset(entry, stream_default)
        assets += [*(layout for layout, _ in resizing), policy_asset]
        jobs += [
            *(job for _, job in resizing),
            define_asset_job(policy_job_name(entry.name), selection=[policy_asset], executor_def=SHORT_JOB_EXECUTOR),
        ]
        if len(stages) == 1:
            first_job = resizing[0][1]
            sensors.append(
                make_elasticity_sensor(entry, first_job.name, interval_s, stream_default, default_status, source)
            )
        else:  # one loop decides for every stage, each rescaled by a run of its own job
            stage_jobs = [job for _, job in resizing]
            sensors.append(
                make_stages_sensor(entry, stages, stage_jobs, interval_s, stream_default, default_status, source)
            )
    return Definitions(assets=assets, jobs=jobs, sensors=sensors)


def _resizing(entry: StreamEntry, stage: str) -> tuple[AssetsDefinition, Any]:
    """One elastic stage's resizing asset and the job whose run rescales it (`define_asset_job`'s,
    whose type Dagster does not export)."""
    layout = make_layout_asset(entry, stage)
    # The tag puts manual launches under the same one-rescale-per-stage concurrency limit.
    # A resize run whose process died (its code server or the daemon killed) would stay STARTED
    # and hold the concurrency slot forever: Dagster's run monitoring fails it after the limit.
    tags = {RESCALE_TAG: rescale_tag_value(entry.name, stage), MAX_RUNTIME_TAG: str(RESIZE_MAX_RUNTIME_S)}
    job = define_asset_job(
        resize_job_name(entry.name, stage), selection=[layout], tags=tags, executor_def=SHORT_JOB_EXECUTOR
    )
    return layout, job


defs = elasticity_definitions()
