"""The elasticity sensor of a multi-stage stream (scripted metrics, no Kafka): the definitions give
such a stream the stages sensor; As-Stream's pre-scale of the downstream stage becomes a run of that
stage's own resize job with a valid config and the stage's rescale tag; while that run is active
no stage is rescaled again."""

from __future__ import annotations

import json

import pytest
from dagster import DagsterInstance, DagsterRunStatus, Definitions, build_sensor_context, validate_run_config

from orchestration.elasticity.decisions import read_decision
from orchestration.elasticity.definitions import elasticity_definitions
from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.elasticity.stages_sensor import make_stages_sensor
from orchestration.names import (
    RESCALE_RULE_TAG,
    RESCALE_TAG,
    elasticity_sensor_name,
    rescale_tag_value,
    resize_job_name,
)
from orchestration.streams.catalog import StreamEntry, stream_spec
from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleTarget
from pipelines.streams.names import stage_paths
from tests.fakes.elasticity_stream import FakeSource, FakeStream, as_first_of_two_stages, downstream_batches

ENTRY = StreamEntry(name="fake", job="benchmarks.multistage_job:two_stage_job", input_topic="fake-in")
STAGES = ("main", "buckets")
POLICY = ElasticityPolicy(slo_s=5.0, sample_period_s=10.0, probe_timeout_s=30.0, max_channels=8)


@pytest.fixture
def instance():
    with DagsterInstance.ephemeral() as ephemeral:
        yield ephemeral


def _job_defs(settings) -> Definitions:
    return Definitions.merge(
        elasticity_definitions([ENTRY], policy=POLICY), Definitions(resources={"esp_settings": settings})
    )


def _sensor(defs: Definitions, stream: FakeStream, policy: ElasticityPolicy = POLICY):
    jobs = [defs.resolve_job_def(resize_job_name(ENTRY.name, stage)) for stage in STAGES]
    return make_stages_sensor(
        ENTRY,
        STAGES,
        jobs,
        10,
        policy,
        source=lambda spec, policy: FakeSource(stream),
        stage_reader=lambda spec, stage, limit: downstream_batches(stream, stage, 200.0),
    )


def _tick(sensor, settings, instance, cursor=None):
    return sensor(build_sensor_context(instance=instance, cursor=cursor, resources={"esp_settings": settings}))


def test_the_definitions_give_a_multi_stage_stream_one_sensor_over_every_stages_resize_job(settings) -> None:
    sensor = _job_defs(settings).resolve_sensor_def(elasticity_sensor_name(ENTRY.name))
    assert {job.name for job in sensor.jobs} == {resize_job_name(ENTRY.name, stage) for stage in STAGES}


def test_a_pre_scale_requests_the_downstream_stages_resize_run(settings, instance) -> None:
    defs = _job_defs(settings)
    stream = as_first_of_two_stages(FakeStream(channels=(0,)).run(60, 400.0, 0.5), 0.25)
    result = _tick(_sensor(defs, stream), settings, instance)
    assert len(result.run_requests) == 1, result.skip_reason
    request = result.run_requests[0]
    assert request.job_name == resize_job_name(ENTRY.name, "buckets")
    assert request.tags[RESCALE_TAG] == rescale_tag_value(ENTRY.name, "buckets")
    assert request.tags[RESCALE_RULE_TAG] == "as-stream-predict"
    assert validate_run_config(defs.resolve_job_def(request.job_name), request.run_config)
    spec = stream_spec(settings.load(), ENTRY)
    recorded = read_decision(stage_paths(spec.folder, "buckets").control)
    assert recorded is not None and recorded.rescale and recorded.rule == "as-stream-predict"
    stream_said = read_decision(spec.control_dir)
    assert stream_said is not None and stream_said.rescale and stream_said.reason.startswith("stage buckets: ")


def test_no_stage_is_rescaled_while_a_stages_resize_run_is_active(settings, instance) -> None:
    defs = _job_defs(settings)
    stream = as_first_of_two_stages(FakeStream(channels=(0,)).run(60, 400.0, 0.5), 0.25)
    job = defs.resolve_job_def(resize_job_name(ENTRY.name, "buckets"))
    instance.create_run_for_job(
        job, tags={RESCALE_TAG: rescale_tag_value(ENTRY.name, "buckets")}, status=DagsterRunStatus.STARTED
    )
    result = _tick(_sensor(defs, stream), settings, instance)
    assert not result.run_requests
    assert "one rescale at a time" in result.skip_reason.skip_message


def test_no_stage_is_rescaled_while_a_request_waits_in_a_later_stages_control_folder(settings, instance) -> None:
    """A request a crashed resize run left for stage buckets (the stream applies it at its next batch
    boundary) is a rescale in flight: deciding again could apply two."""
    defs = _job_defs(settings)
    stream = as_first_of_two_stages(FakeStream(channels=(0,)).run(60, 400.0, 0.5), 0.25)
    spec = stream_spec(settings.load(), ENTRY)
    control = ControlChannel(stage_paths(spec.folder, "buckets").control)
    control.request(RescaleRequest(target=RescaleTarget(op="scale_to", channels=3)))
    result = _tick(_sensor(defs, stream), settings, instance)
    assert not result.run_requests
    assert "waits for fake (stage buckets)'s next batch boundary" in result.skip_reason.skip_message


def test_with_automatic_rescaling_off_it_says_what_it_would_do_and_its_offsets_move_on(settings, instance) -> None:
    """As the single-stage sensor: no run, the reason names the rescale; the loop's state is kept
    but the offsets move on, so the next tick's rates cover one period, not all since the last
    rescale."""
    defs = _job_defs(settings)
    stream = as_first_of_two_stages(FakeStream(channels=(0,)).run(60, 400.0, 0.5), 0.25)
    sensor = _sensor(defs, stream, POLICY.model_copy(update={"auto_rescale": False}))
    result = _tick(sensor, settings, instance, cursor=json.dumps({"loop": "", "offsets": None}))
    assert not result.run_requests
    assert "automatic rescaling is off" in result.skip_reason.skip_message
    assert "buckets" in result.skip_reason.skip_message
    cursor = json.loads(result.cursor)
    assert cursor["loop"] == ""  # the loop's state as it was
    assert cursor["offsets"]["time_s"] == pytest.approx(stream.now_s)
