"""The elasticity sensor's decisions on scripted metrics (no Kafka): RunRequests, SkipReasons, guards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, Definitions, build_sensor_context, validate_run_config

from orchestration.elasticity.definitions import elasticity_definitions
from orchestration.elasticity.policy import ElasticityPolicy, write_policy
from orchestration.elasticity.sensor import make_elasticity_sensor
from orchestration.names import (
    RESCALE_REASON_TAG,
    RESCALE_RULE_TAG,
    RESCALE_TAG,
    layout_asset_key,
    op_name,
    resize_job_name,
)
from orchestration.resources import EspSettingsResource
from orchestration.streams.catalog import StreamEntry, stream_spec
from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleTarget
from tests.fakes.elasticity_stream import FakeSource, FakeStream

ENTRY = StreamEntry(name="fake", job="wordcount", input_topic="fake-in", load_kind="words")
POLICY = ElasticityPolicy(slo_s=5.0, sample_period_s=10.0, probe_timeout_s=30.0, max_channels=8)
LAYOUT_OP = op_name(layout_asset_key(ENTRY.name))


@pytest.fixture
def instance():
    with DagsterInstance.ephemeral() as ephemeral:
        yield ephemeral


class Harness:
    """Evaluates the sensor tick by tick against a FakeStream, carrying the cursor like the daemon."""

    def __init__(self, stream: FakeStream, settings: EspSettingsResource, instance: DagsterInstance) -> None:
        self.stream = stream
        self.settings = settings
        self.instance = instance
        self.sensor = make_elasticity_sensor(
            ENTRY, resize_job_name(ENTRY.name), 10, POLICY, source=lambda spec, policy: FakeSource(stream)
        )
        self.cursor: str | None = None

    def tick(self):
        context = build_sensor_context(
            instance=self.instance, cursor=self.cursor, resources={"esp_settings": self.settings}
        )
        result = self.sensor(context)
        self.cursor = result.cursor
        return result

    def ticks_until_request(self, step, limit: int = 8):
        """Advance the stream one period with `step`, tick; return (skips seen, the first run request)."""
        skips = []
        for _ in range(limit):
            step()
            result = self.tick()
            if result.run_requests:
                return skips, result.run_requests[0]
            skips.append(result.skip_reason.skip_message)
        return skips, None


def test_no_metrics_yet_is_a_skip_that_says_so(settings, instance):
    result = Harness(FakeStream(), settings, instance).tick()
    assert not result.run_requests
    assert "no metrics yet" in result.skip_reason.skip_message


def test_overload_requests_a_scale_out_run_with_valid_config_and_tags(settings, instance):
    stream = FakeStream(channels=(0, 1))
    harness = Harness(stream, settings, instance)
    lag = iter(range(1000, 100_000, 4000))
    skips, request = harness.ticks_until_request(lambda: stream.run(10, 400, 12.0, lag_records=next(lag)))
    assert request is not None, skips
    assert any("warming up" in s for s in skips)
    assert request.tags[RESCALE_TAG] == ENTRY.name
    assert request.tags[RESCALE_RULE_TAG].startswith("P1")
    assert "congested" in request.tags[RESCALE_REASON_TAG]
    config = request.run_config["ops"][LAYOUT_OP]["config"]
    assert config["target"]["op"] == "scale_to" and config["target"]["channels"] > 2
    defs = Definitions.merge(elasticity_definitions([ENTRY]), Definitions(resources={"esp_settings": settings}))
    assert validate_run_config(defs.resolve_job_def(resize_job_name(ENTRY.name)), request.run_config)


def test_after_a_rescale_the_old_layouts_overload_does_not_trigger_a_second_one(settings, instance):
    stream = FakeStream(channels=(0, 1))
    harness = Harness(stream, settings, instance)
    lag = iter(range(1000, 100_000, 4000))
    _, request = harness.ticks_until_request(lambda: stream.run(10, 400, 12.0, lag_records=next(lag)))
    assert request is not None
    # The run committed the new layout; the stream is still busy with its last old-layout batch.
    to_channels = request.run_config["ops"][LAYOUT_OP]["config"]["target"]["channels"]
    stream.commit_layout(range(to_channels))
    for _ in range(3):
        stream.run(10, 400, 14.0, lag_records=next(lag))
        result = harness.tick()
        assert not result.run_requests
        assert f"waiting for the first batch of layout epoch 1 ({to_channels} channels)" in (
            result.skip_reason.skip_message
        )


def test_a_committed_layout_the_input_already_outruns_is_scaled_out_before_its_first_batch(settings, instance):
    # One channel at 300 rec/s, busy 60 % of the time: 500 rec/s a channel by busy time. A person
    # commits 2 channels; before their first batch, 1,500 rec/s arrive: more than 2 x 500.
    stream = FakeStream(channels=(0,))
    harness = Harness(stream, settings, instance)
    stream.run(10, 300, 1.0, service_ms=2.0)
    assert not harness.tick().run_requests
    stream.commit_layout((0, 1)).stall(10, 1500)
    result = harness.tick()
    assert len(result.run_requests) == 1, result.skip_reason
    request = result.run_requests[0]
    assert "outgrown before its first batch" in request.tags[RESCALE_REASON_TAG]
    assert request.run_config["ops"][LAYOUT_OP]["config"]["target"]["channels"] > 2
    # One rescale at a time: the next tick waits for that one to commit.
    stream.stall(10, 1500)
    waiting = harness.tick()
    assert not waiting.run_requests and "has not committed yet" in waiting.skip_reason.skip_message


def test_a_steady_stream_within_the_slo_is_stable_and_says_why(settings, instance):
    stream = FakeStream(channels=(0, 1, 2, 3))
    harness = Harness(stream, settings, instance)
    skips, request = harness.ticks_until_request(lambda: stream.run(10, 400, 0.8, lag_records=200), limit=6)
    assert request is None
    assert skips[-1].startswith("stable at 4 channels: p99 800 ms (SLO 5,000 ms), lag 200 records")


def test_a_fall_in_load_after_a_measured_congestion_scales_in(settings, instance):
    stream = FakeStream(channels=(0, 1))
    harness = Harness(stream, settings, instance)
    lag = iter(range(1000, 100_000, 4000))
    _, request = harness.ticks_until_request(lambda: stream.run(10, 400, 12.0, lag_records=next(lag)))
    assert request is not None
    grown = request.run_config["ops"][LAYOUT_OP]["config"]["target"]["channels"]
    stream.relayout(range(grown))
    skips, request = harness.ticks_until_request(lambda: stream.run(10, 40, 0.3, lag_records=0), limit=10)
    assert request is not None, skips
    assert request.tags[RESCALE_RULE_TAG] == "P2"
    assert request.run_config["ops"][LAYOUT_OP]["config"]["target"]["channels"] < grown


def test_a_hot_channel_is_split_by_its_layout_id(settings, instance):
    stream = FakeStream(channels=(0, 2, 3, 5, 9, 11))
    harness = Harness(stream, settings, instance)
    hot = {c: (12.0 if c == 9 else 0.5) for c in stream.channels}
    skips, request = harness.ticks_until_request(lambda: stream.run(10, 800, hot, lag_records=500))
    assert request is not None, skips
    target = request.run_config["ops"][LAYOUT_OP]["config"]["target"]
    assert (target["op"], target["channel"]) == ("split", 9)


def test_an_active_rescale_run_blocks_a_second_one(settings, instance):
    from dagster._core.test_utils import create_run_for_test

    run = create_run_for_test(
        instance, job_name=resize_job_name(ENTRY.name), tags={RESCALE_TAG: ENTRY.name}, status=DagsterRunStatus.STARTED
    )
    stream = FakeStream(channels=(0, 1))
    harness = Harness(stream, settings, instance)
    lag = iter(range(1000, 100_000, 4000))
    skips, request = harness.ticks_until_request(lambda: stream.run(10, 400, 12.0, lag_records=next(lag)), limit=5)
    assert request is None
    assert all(f"rescale run {run.run_id[:8]} of fake is STARTED" in s for s in skips)


def test_a_request_waiting_in_the_control_folder_blocks_a_new_one(settings, instance):
    spec = stream_spec(settings.load(), ENTRY)
    ControlChannel(spec.control_dir).request(RescaleRequest(target=RescaleTarget(op="scale_to", channels=3)))
    stream = FakeStream(channels=(0, 1)).run(10, 400, 12.0)
    result = Harness(stream, settings, instance).tick()
    assert "waits for fake's next batch boundary" in result.skip_reason.skip_message


def test_the_stream_policy_file_overrides_the_default(settings, instance):
    spec = stream_spec(settings.load(), ENTRY)
    write_policy(spec.control_dir, ElasticityPolicy(slo_s=20.0, sample_period_s=10.0))
    stream = FakeStream(channels=(0, 1))
    harness = Harness(stream, settings, instance)
    # 12 s latency breaks the default 5 s SLO, not the stream's own 20 s: no rescale.
    skips, request = harness.ticks_until_request(lambda: stream.run(10, 400, 12.0, lag_records=200), limit=6)
    assert request is None
    assert "SLO 20,000 ms" in skips[-1]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"{not json", "is not JSON"),
        (b"\xff\xfe", "is not JSON"),
        (b"[1, 2]", "must hold a JSON object"),
        (b'{"max_channels": 100000}', "max_channels: Input should be less than or equal to 1024"),
        (b'{"min_channels": 0}', "min_channels: Input should be greater than or equal to 1"),
        (b'{"min_channels": 5, "max_channels": 2}', "min_channels 5 > max_channels 2"),
        (b'{"slo": 3}', "slo: Extra inputs are not permitted"),
    ],
)
def test_a_malformed_policy_file_is_skipped_with_its_problem_named(settings, instance, text, problem):
    spec = stream_spec(settings.load(), ENTRY)
    policy_file = Path(write_policy(spec.control_dir, ElasticityPolicy()))
    policy_file.write_bytes(text)
    stream = FakeStream(channels=(0, 1)).run(10, 400, 12.0)
    message = Harness(stream, settings, instance).tick().skip_reason.skip_message
    assert str(policy_file) in message and problem in message and "fix or remove it" in message


def test_the_cursor_is_small_json(settings, instance):
    stream = FakeStream(channels=tuple(range(8)))
    harness = Harness(stream, settings, instance)
    for _ in range(5):
        stream.run(10, 400, 0.5)
        harness.tick()
    data = json.loads(harness.cursor)
    assert set(data) == {"loop", "offsets"}
    assert len(harness.cursor) < 20_000
