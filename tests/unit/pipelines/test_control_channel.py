"""The control channel: a malformed request file is set aside with its reason, never left to fail
every batch; requests carry the planned layout and answers are typed, both round-tripping exactly."""

from __future__ import annotations

import json
import os
import time

import pytest

from elasticity.layout import Layout
from elasticity.migration.report import MigrationReport
from pipelines.streams.control import (
    ANSWER_MIN_AGE_S,
    KEEP_ANSWERS,
    REQUEST,
    ControlChannel,
    RescaleRequest,
    RescaleResult,
    RescaleTarget,
    next_layout_of,
)


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b'{"target": {"op": "explode"}}',
        b'{"target": {"op": "scale_to", "channels": -3}}',
        b'{"target": {"op": "split", "channel": 1}, "base_epoch": "yesterday"}',
    ],
)
def test_a_malformed_request_is_set_aside_with_its_reason(tmp_path, raw):
    control = ControlChannel(str(tmp_path))
    (tmp_path / REQUEST).write_bytes(raw)
    assert control.take_request() is None
    assert not (tmp_path / REQUEST).exists()
    (reason,) = control.rejected()
    assert reason.startswith("malformed rescale request")
    (kept,) = tmp_path.glob("rejected-*.json")
    assert control.location.read_bytes(kept.name) == raw  # kept as it came (with a checksum)
    # The channel works again: the next request is taken as usual.
    request = RescaleRequest(target=RescaleTarget(op="split", channel=0), base_epoch=2)
    control.request(request)
    assert control.take_request() == request


def test_a_sealed_request_damaged_on_disk_is_set_aside_not_raised_every_batch(tmp_path):
    control = ControlChannel(str(tmp_path))
    control.request(RescaleRequest(target=RescaleTarget(op="scale_to", channels=3)))
    damaged = bytearray((tmp_path / REQUEST).read_bytes())
    damaged[5] ^= 0x01  # a flipped bit inside the payload: the trailer's checksum no longer holds
    (tmp_path / REQUEST).write_bytes(bytes(damaged))
    assert control.take_request() is None
    assert not (tmp_path / REQUEST).exists()
    (reason,) = control.rejected()
    assert reason.startswith("corrupt rescale request") and "checksum mismatch" in reason
    (kept,) = tmp_path.glob("rejected-*.json")
    assert control.location.read_bytes(kept.name) == bytes(damaged)  # kept exactly as found


def test_a_planned_layout_that_does_not_cover_the_ring_is_set_aside_with_the_layout_error(tmp_path):
    control = ControlChannel(str(tmp_path))
    broken = {"format": "esp-layout/1", "epoch": 1, "bounds": [0], "owners": [0]}  # stops at hash 0
    request = {"target": {"op": "split", "channel": 0}, "base_epoch": 0, "planned": broken}
    (tmp_path / REQUEST).write_text(json.dumps(request))
    assert control.take_request() is None
    (reason,) = control.rejected()
    assert "planned" in reason and "covers the whole hash space" in reason


def test_a_valid_request_stays_until_answered(tmp_path):
    control = ControlChannel(str(tmp_path))
    request = RescaleRequest(target=RescaleTarget(op="scale_to", channels=3))
    control.request(request)
    assert control.take_request() == control.take_request() == request
    answer = RescaleResult(request_id=request.request_id, status="committed", layout=Layout.uniform(3))
    control.publish_result(answer)
    assert control.take_request() is None
    assert control.result(request.request_id) == answer


def test_request_and_result_round_trip_with_layout_and_report(tmp_path):
    control = ControlChannel(str(tmp_path))
    current = Layout.uniform(2)
    planned = current.split(1).renumbered(1)
    request = RescaleRequest(target=RescaleTarget(op="split", channel=1), base_epoch=0, planned=planned)
    control.request(request)
    taken = control.take_request()
    assert taken == request and taken.planned == planned
    report = MigrationReport(0, 1, "split", 2, 3, keys_moved=10, keys_total=40, phase_ms={"donate": 1.5})
    answer = RescaleResult(request_id=request.request_id, status="committed", layout=planned, report=report)
    control.publish_result(answer)
    again = control.result(request.request_id)
    assert again == answer and again.report.fraction_moved == 0.25


def test_the_stream_applies_the_planned_layout_not_its_own_plan():
    current = Layout.uniform(3)
    # A merge planned by the sender differs from what the target alone would give: the plan wins.
    planned = current.merge(0).renumbered(1)
    request = RescaleRequest(target=RescaleTarget(op="scale_to", channels=2), base_epoch=0, planned=planned)
    assert next_layout_of(request, current) == planned
    assert next_layout_of(request.model_copy(update={"planned": None}), current) == current.scale_in(1)


def test_a_plan_without_its_base_epoch_or_equal_to_the_committed_layout_is_refused():
    current = Layout.uniform(2)
    with pytest.raises(ValueError, match="base_epoch"):
        next_layout_of(RescaleRequest(target=RescaleTarget(op="split", channel=0), planned=current.split(0)), current)
    with pytest.raises(ValueError, match="nothing to do"):
        next_layout_of(
            RescaleRequest(target=RescaleTarget(op="split", channel=0), base_epoch=0, planned=current.renumbered(5)),
            current,
        )


def _age(path, seconds: float) -> None:
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def test_old_answers_beyond_the_newest_are_forgotten_when_a_result_is_published(tmp_path):
    control = ControlChannel(str(tmp_path))
    ids = [f"r{i:02d}" for i in range(KEEP_ANSWERS + 5)]
    for age, request_id in zip(range(len(ids), 0, -1), ids, strict=True):
        answer = RescaleResult(request_id=request_id, status="failed")
        control.location.publish_bytes(f"result-{request_id}.json", answer.model_dump_json().encode())
        _age(tmp_path / f"result-{request_id}.json", ANSWER_MIN_AGE_S + age)  # all old; r00 the oldest
    control.publish_result(RescaleResult(request_id="fresh", status="failed"))
    kept = control.answers()
    assert kept == ids[6:] + ["fresh"]  # the newest KEEP_ANSWERS, the fresh one among them
    assert control.result("r00") is None and control.result("fresh") is not None


def test_young_answers_are_kept_however_many(tmp_path):
    control = ControlChannel(str(tmp_path))
    for i in range(KEEP_ANSWERS + 8):
        control.publish_result(RescaleResult(request_id=f"r{i:02d}", status="failed"))
    assert len(control.answers()) == KEEP_ANSWERS + 8  # a slow waiter still finds its answer


def test_old_set_aside_requests_go_with_their_reasons(tmp_path):
    control = ControlChannel(str(tmp_path))
    for _ in range(KEEP_ANSWERS + 3):
        (tmp_path / REQUEST).write_bytes(b"{not json")
        assert control.take_request() is None
    for path in tmp_path.glob("rejected-*"):
        _age(path, ANSWER_MIN_AGE_S + 1)
    control.publish_result(RescaleResult(request_id="any", status="failed"))
    assert len(control.rejected()) == KEEP_ANSWERS
    assert len(list(tmp_path.glob("rejected-*.json"))) == KEEP_ANSWERS
