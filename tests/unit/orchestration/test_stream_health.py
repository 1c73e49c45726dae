"""Health: SLO and dead-letter rate verdicts, the samples read back from observations, the
dashboard PNG, the alerts of failed runs, and a stream stopped from the UI staying stopped."""

from __future__ import annotations

import time

import pytest
from dagster import AssetObservation, DagsterInstance, DagsterRunStatus, SkipReason, build_sensor_context
from dagster._core.storage.dagster_run import DagsterRun

from orchestration.health.alerts import Alert, FileSink, alert_for, read_alerts
from orchestration.health.dashboard import render_dashboard
from orchestration.health.samples import (
    StreamSample,
    evaluate_dead_letter_rate,
    evaluate_slo,
    recent_samples,
    rescales,
)
from orchestration.names import resize_job_name, stream_asset_key, stream_job_name
from orchestration.streams.catalog import STREAMS, stream_spec
from orchestration.streams.stop import StopMarker, clear_stop_marker, read_stop_marker, write_stop_marker
from orchestration.streams.supervisor import make_supervisor

ENTRY = STREAMS[0]


def _sample(at: float, p99_ms: float, channels: int = 2, epoch: int = 0) -> StreamSample:
    return StreamSample(at, 100.0, 95.0, 10.0, p99_ms, channels, epoch)


def test_slo_passes_within_the_allowed_share_of_breaches_and_fails_beyond():
    calm = [_sample(t, 800) for t in range(18)] + [_sample(18, 9000), _sample(19, 7000)]
    verdict = evaluate_slo(calm, 5000, 0.1)
    assert verdict.passed and verdict.numbers["breaches"] == 2 and verdict.numbers["worst_p99_ms"] == 9000
    hot = calm + [_sample(20, 6000)]
    failed = evaluate_slo(hot, 5000, 0.1)
    assert not failed.passed
    assert "p99 above the SLO of 5,000 ms in 3 of 21 observations" in failed.description
    assert not evaluate_slo([], 5000, 0.1).passed  # no observations: nothing proves the SLO holds


def test_the_dead_letter_rate_is_judged_on_enough_input_only():
    assert evaluate_dead_letter_rate(5, 1000, 0.01, 100).passed
    failed = evaluate_dead_letter_rate(50, 1000, 0.01, 100)
    assert not failed.passed and failed.numbers["rate"] == 0.05 and "5.000%" in failed.description
    assert evaluate_dead_letter_rate(9, 10, 0.01, 100).passed  # too little input to judge


def test_samples_come_back_from_the_stream_assets_observations_with_rescales():
    key = stream_asset_key(ENTRY.name)
    with DagsterInstance.ephemeral() as instance:
        for channels, epoch, p99 in [(2, 0, 500.0), (2, 0, 700.0), (4, 1, 600.0)]:
            metadata = {"channels": channels, "layout_epoch": epoch, "probe_latency_p99_ms": p99, "lag_records": 3}
            instance.report_runless_asset_event(AssetObservation(asset_key=key, metadata=metadata))
        samples = recent_samples(instance, key, 600, time.time())
    assert [(s.channels, s.epoch, s.p99_ms) for s in samples] == [(2, 0, 500.0), (2, 0, 700.0), (4, 1, 600.0)]
    assert [(r.channels_before, r.channels_after) for r in rescales(samples)] == [(2, 4)]


def test_the_dashboard_is_a_png_with_or_without_history(tmp_path):
    samples = [_sample(1_000_000 + 5 * i, 500 + 10 * i, 2 if i < 10 else 4, 0 if i < 10 else 1) for i in range(20)]
    png = render_dashboard(samples, 5000, "words", tmp_path / "d.png")
    assert png.startswith(b"\x89PNG") and (tmp_path / "d.png").stat().st_size == len(png)
    assert render_dashboard([], 5000, "words", tmp_path / "empty.png").startswith(b"\x89PNG")


def test_failed_stream_and_resize_runs_are_alerts_other_jobs_are_not(tmp_path):
    stream_alert = alert_for(stream_job_name(ENTRY.name), "r1", {}, "boom", 1.0, STREAMS)
    resize_alert = alert_for(resize_job_name(ENTRY.name), "r2", {}, "refused", 2.0, STREAMS)
    assert (stream_alert.kind, stream_alert.stream) == ("stream", ENTRY.name)
    assert (resize_alert.kind, resize_alert.message) == ("resize", "refused")
    assert alert_for("validation_job", "r3", {}, "x", 3.0, STREAMS) is None
    sink = FileSink(tmp_path / "alerts.jsonl")
    sink.send(stream_alert)
    sink.send(resize_alert)
    assert read_alerts(tmp_path) == [stream_alert, resize_alert]
    assert isinstance(read_alerts(tmp_path)[0], Alert)


@pytest.fixture
def instance():
    with DagsterInstance.ephemeral() as ephemeral:
        yield ephemeral


def test_a_stream_stopped_from_the_ui_is_not_restarted_until_started_by_hand(instance, settings):
    job = stream_job_name(ENTRY.name)
    instance.add_run(DagsterRun(job_name=job, status=DagsterRunStatus.CANCELED))
    control_dir = stream_spec(settings.load(), ENTRY).control_dir
    write_stop_marker(control_dir, StopMarker("abcdef123456", time.time(), "stopped from the UI"))
    supervisor = make_supervisor(ENTRY, job)
    result = supervisor(build_sensor_context(instance=instance, resources={"esp_settings": settings}))
    assert isinstance(result, SkipReason)
    assert "was stopped at" in result.skip_message and "by run abcdef12 (stopped from the UI)" in result.skip_message
    assert f"launch {job} to start it again" in result.skip_message
    assert read_stop_marker(control_dir).note == "stopped from the UI"
    assert clear_stop_marker(control_dir) and not clear_stop_marker(control_dir)
    result = supervisor(build_sensor_context(instance=instance, resources={"esp_settings": settings}))
    assert not isinstance(result, SkipReason)  # a RunRequest: the supervisor keeps it alive again
