"""A stream's control folder on an object store: the rescale request/result channel, heartbeat,
watermark log, the policy override, decision and stop marker, and the stream's folders read from
outside its process, against a real S3-compatible server (moto's, on 127.0.0.1; fixture `s3_root`)."""

from __future__ import annotations

import time

from elasticity.layout import Layout
from elasticity.migration import LayoutRegistry
from elasticity.state import Location
from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleResult, RescaleTarget
from pipelines.streams.files import StreamFiles
from pipelines.streams.heartbeat import HeartbeatWriter, read_heartbeat
from pipelines.streams.spec import StreamSpec
from pipelines.streams.watermark import WatermarkLog


def test_a_rescale_request_and_its_result_travel_through_s3(s3_root):
    spec = StreamSpec(root=s3_root)
    requester, stream = ControlChannel(spec.control_dir), ControlChannel(spec.control_dir)
    request = RescaleRequest(target=RescaleTarget(op="scale_to", channels=4), reason="manual")
    requester.request(request)
    assert StreamFiles(spec).pending_request() == request
    taken = stream.take_request()
    assert taken is not None and taken.request_id == request.request_id
    stream.publish_result(RescaleResult(request_id=request.request_id, status="committed"))
    assert stream.take_request() is None
    assert requester.wait_for_result(request.request_id, timeout_s=10).committed
    assert requester.answers() == [request.request_id]


def test_a_malformed_request_on_s3_is_set_aside_with_its_reason(s3_root):
    control = ControlChannel(f"{s3_root}/control")
    Location.of(f"{s3_root}/control").publish_bytes("rescale-request.json", b"{not json", sealed=False)
    assert control.take_request() is None
    assert len(control.rejected()) == 1 and "malformed rescale request" in control.rejected()[0]


def test_heartbeat_and_watermarks_on_s3(s3_root):
    control = f"{s3_root}/control"
    HeartbeatWriter(control).beat()
    beat = read_heartbeat(control)
    assert beat is not None and abs(beat.at - time.time()) < 60
    log = WatermarkLog(f"{control}/watermarks", lateness_ms=1000)
    log.record(0, None, 5_000)
    log.record(1, 4_000, 3_000)
    assert log.watermark_for(1) == 4_000 and log.watermark_for(2) == 4_000


def test_the_controllers_documents_on_s3(s3_root):
    from orchestration.elasticity.decisions import DecisionRecord, read_decision, write_decision
    from orchestration.elasticity.policy import ElasticityPolicy, change_policy, load_policy
    from orchestration.streams.stop import StopMarker, clear_stop_marker, read_stop_marker, write_stop_marker

    control = StreamSpec(root=s3_root).control_dir
    change_policy(control, {"slo_s": 9.0}, ElasticityPolicy())
    assert load_policy(control, ElasticityPolicy()).slo_s == 9.0
    write_decision(control, DecisionRecord(at=1.0, rescale=False, reason="steady"))
    assert read_decision(control) == DecisionRecord(at=1.0, rescale=False, reason="steady")
    assert read_stop_marker(control) is None
    write_stop_marker(control, StopMarker("run-1", 2.0, "maintenance"))
    assert read_stop_marker(control) == StopMarker("run-1", 2.0, "maintenance")
    assert clear_stop_marker(control) and read_stop_marker(control) is None


def test_the_stream_folders_on_s3_read_from_outside(s3_root):
    spec = StreamSpec(root=s3_root)
    files = StreamFiles(spec)
    assert files.committed_layout() is None and files.newest_committed_batch() is None
    LayoutRegistry(Location.of(spec.elastic_root)).initialize(Layout.uniform(2))
    checkpoint = Location.of(spec.checkpoint)
    checkpoint.child("offsets").publish_bytes("0", b'v1\n{}\n{"words":{"0":3}}\n', sealed=False)
    checkpoint.child("commits").publish_bytes("0", b"v1\n{}\n", sealed=False)
    assert files.committed_layout() == Layout.uniform(2)
    assert (files.newest_planned_batch(), files.newest_committed_batch(), files.batch_in_flight()) == (0, 0, None)
    age = files.heartbeat_age_s()
    assert age is not None and age < 600


def test_a_plot_is_published_beside_a_stream_on_s3(s3_root):
    from orchestration.health.dashboard import render_dashboard

    png = render_dashboard([], 5000, "words", f"{s3_root}/control/plots/dashboard.png")
    assert png.startswith(b"\x89PNG")
    assert Location.of(f"{s3_root}/control/plots").read_document("dashboard.png") == png
