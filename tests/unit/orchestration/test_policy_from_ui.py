"""The policy from the UI: the policy job's config is validated, merged into the stream's one
override file and recorded; the sensor's next decision uses (and cites) it; automatic rescaling
can be switched off; split/merge and the cooldown reach the controller."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize
from pydantic import ValidationError

from orchestration.elasticity.decisions import read_decision
from orchestration.elasticity.policy import (
    ElasticityPolicy,
    PolicyFileError,
    change_policy,
    load_policy,
    policy_path,
)
from orchestration.elasticity.policy_asset import make_policy_asset
from orchestration.elasticity.sensor import make_elasticity_sensor
from orchestration.names import RESCALE_REASON_TAG, layout_asset_key, op_name, policy_asset_key, resize_job_name
from orchestration.streams.catalog import StreamEntry, stream_spec
from tests.fakes.elasticity_stream import FakeSource, FakeStream

ENTRY = StreamEntry(name="fake", job="wordcount", input_topic="fake-in", load_kind="words")
DEFAULT = ElasticityPolicy(slo_s=5.0, sample_period_s=10.0, probe_timeout_s=30.0, max_channels=8)
POLICY_OP = op_name(policy_asset_key(ENTRY.name))


def _set_policy(settings, instance, **config):
    return materialize(
        [make_policy_asset(ENTRY, DEFAULT)],
        resources={"esp_settings": settings},
        run_config={"ops": {POLICY_OP: {"config": config}}},
        instance=instance,
        raise_on_error=False,
    )


@pytest.fixture
def instance():
    with DagsterInstance.ephemeral() as ephemeral:
        yield ephemeral


def test_changes_merge_into_the_override_file_and_reset_drops_them(tmp_path):
    policy, overrides = change_policy(tmp_path, {"slo_s": 20.0}, DEFAULT)
    assert policy.slo_s == 20.0 and overrides == {"slo_s": 20.0}
    policy, overrides = change_policy(tmp_path, {"max_channels": 4, "auto_rescale": False}, DEFAULT)
    assert (policy.slo_s, policy.max_channels, policy.auto_rescale) == (20.0, 4, False)
    assert load_policy(tmp_path, DEFAULT) == policy
    policy, overrides = change_policy(tmp_path, {"cooldown_s": 30.0}, DEFAULT, reset=True)
    assert overrides == {"cooldown_s": 30.0} and policy.slo_s == DEFAULT.slo_s
    assert not list(tmp_path.glob(".*.tmp"))  # written through a renamed scratch file


def test_an_invalid_change_is_refused_and_changes_nothing(tmp_path):
    change_policy(tmp_path, {"max_channels": 4}, DEFAULT)
    before = Path(policy_path(tmp_path)).read_text()
    with pytest.raises(PolicyFileError, match="min_channels 6 > max_channels 4; nothing changed"):
        change_policy(tmp_path, {"min_channels": 6}, DEFAULT)
    assert Path(policy_path(tmp_path)).read_text() == before


def test_the_policy_job_records_the_change_as_a_materialization(settings, instance):
    result = _set_policy(settings, instance, slo_s=20.0, split_merge=False, note="looser SLO")
    assert result.success
    metadata = result.asset_materializations_for_node(POLICY_OP)[0].metadata
    assert metadata["slo_ms"].value == 20_000
    assert metadata["split_merge"].value is False
    assert metadata["changed"].value == {"slo_s": 20.0, "split_merge": False}
    control_dir = stream_spec(settings.load(), ENTRY).control_dir
    assert json.loads(Path(policy_path(control_dir)).read_text()) == {"slo_s": 20.0, "split_merge": False}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"min_channels": 9}, "min_channels 9 > max_channels 8"),
        ({"slo_s": -1.0}, "slo_s: Input should be greater than 0"),
        ({"max_channels": 10_000}, "max_channels: Input should be less than or equal to"),
    ],
)
def test_a_bad_value_fails_the_run_with_a_clear_error(settings, instance, config, message):
    result = _set_policy(settings, instance, **config)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert failure.step_failure_data.user_failure_data.description.startswith("the policy change is invalid: ")
    assert message in failure.step_failure_data.user_failure_data.description
    assert not Path(policy_path(stream_spec(settings.load(), ENTRY).control_dir)).exists()


def _sensor_ticks(settings, instance, stream: FakeStream, step, limit: int):
    sensor = make_elasticity_sensor(
        ENTRY, resize_job_name(ENTRY.name), 10, DEFAULT, source=lambda spec, policy: FakeSource(stream)
    )
    from dagster import build_sensor_context

    cursor, results = None, []
    for _ in range(limit):
        step()
        context = build_sensor_context(instance=instance, cursor=cursor, resources={"esp_settings": settings})
        result = sensor(context)
        cursor = result.cursor
        results.append(result)
        if result.run_requests:
            break
    return results


def test_the_next_tick_uses_and_cites_the_new_slo(settings, instance):
    stream = FakeStream(channels=(0, 1, 2, 3))
    step = lambda: stream.run(10, 400, 0.8, lag_records=200)  # noqa: E731
    assert "SLO 5,000 ms" in _sensor_ticks(settings, instance, stream, step, 2)[-1].skip_reason.skip_message
    assert _set_policy(settings, instance, slo_s=42.0).success
    assert "SLO 42,000 ms" in _sensor_ticks(settings, instance, stream, step, 1)[-1].skip_reason.skip_message
    recorded = read_decision(stream_spec(settings.load(), ENTRY).control_dir)  # what `esp status` shows
    assert not recorded.rescale and "SLO 42,000 ms" in recorded.reason


def test_a_rescale_decision_cites_the_slo_it_was_decided_under(settings, instance):
    stream = FakeStream(channels=(0, 1))
    lag = iter(range(1000, 100_000, 4000))
    results = _sensor_ticks(settings, instance, stream, lambda: stream.run(10, 400, 12.0, lag_records=next(lag)), 8)
    request = results[-1].run_requests[0]
    assert request.tags[RESCALE_REASON_TAG].endswith("(SLO 5,000 ms)")
    assert request.run_config["ops"][op_name(layout_asset_key(ENTRY.name))]["config"]["reason"].endswith(
        "(SLO 5,000 ms)"
    )


def test_automatic_rescaling_off_holds_and_says_so(settings, instance):
    assert _set_policy(settings, instance, auto_rescale=False).success
    stream = FakeStream(channels=(0, 1))
    lag = iter(range(1000, 100_000, 4000))
    results = _sensor_ticks(settings, instance, stream, lambda: stream.run(10, 400, 12.0, lag_records=next(lag)), 8)
    assert not any(r.run_requests for r in results)
    assert results[-1].skip_reason.skip_message.startswith("automatic rescaling is off in the policy; p99 12,000 ms")


def test_split_merge_and_cooldown_reach_the_controller():
    options = ElasticityPolicy(split_merge=False, cooldown_s=45.0).control_options().controller
    assert (options.enable_split_merge, options.cooldown_s) == (False, 45.0)
    assert ElasticityPolicy(sample_period_s=7.0).control_options().controller.cooldown_s == 7.0


def test_the_utilization_targets_reach_the_controller_and_keep_a_band():
    options = ElasticityPolicy(scale_out_utilization=0.75, scale_in_utilization=0.7).control_options().controller
    assert (options.scale_out_utilization, options.scale_in_utilization) == (0.75, 0.7)
    assert options.drain_within_band  # the backlog drains in the band, not by channels P2 takes back
    with pytest.raises(ValidationError, match="no band between them"):
        ElasticityPolicy(scale_out_utilization=0.6, scale_in_utilization=0.7)
