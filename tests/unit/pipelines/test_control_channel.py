"""The control channel: a malformed request file is set aside with its reason, never left to fail every batch."""

from __future__ import annotations

import pytest

from pipelines.streams.control import REQUEST, ControlChannel, RescaleRequest, RescaleTarget


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


def test_a_valid_request_stays_until_answered(tmp_path):
    control = ControlChannel(str(tmp_path))
    request = RescaleRequest(target=RescaleTarget(op="scale_to", channels=3))
    control.request(request)
    assert control.take_request() == control.take_request() == request
    control.publish_result(request.request_id, {"status": "committed"})
    assert control.take_request() is None
    assert control.result(request.request_id) == {"status": "committed"}
