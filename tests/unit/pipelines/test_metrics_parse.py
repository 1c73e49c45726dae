"""`BatchMetrics.from_json` on any bytes or JSON shape: a BatchMetrics, or `MalformedMetrics` saying why."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.streams.metrics import BatchMetrics, ChannelMetrics, MalformedMetrics

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
FIELDS = ["stream", "batch_id", "epoch", "channels", "wall_time", "batch_ms", "input_records", "per_channel"]


def _parse(raw: bytes | None) -> None:
    try:
        metrics = BatchMetrics.from_json(raw)  # type: ignore[arg-type]
    except MalformedMetrics:
        return
    # What parses is something the sensor can compute with.
    sorted([metrics], key=lambda m: (m.wall_time, m.batch_id))
    assert all(isinstance(lat, int | float) for lat in metrics.probe_latencies)


@settings(deadline=None)  # a busy machine, not slow code
@given(st.binary(max_size=64))
def test_any_bytes_parse_or_are_malformed(raw):
    _parse(raw)


@settings(deadline=None)
@given(st.fixed_dictionaries({}, optional={name: JSON for name in FIELDS}))
def test_any_json_shape_parses_or_is_malformed(data):
    _parse(json.dumps(data).encode())


def test_a_tombstone_and_wrong_types_are_malformed_with_the_field_named():
    for raw, says in [
        (None, "not JSON"),
        (b"[1]", "not an object"),
        (b'{"stream": "s", "batch_id": 1, "epoch": 1, "channels": 1, "wall_time": "now"}', "wall_time"),
        (b'{"stream": "s", "batch_id": 1, "epoch": 1, "channels": 1}', "wall_time"),
    ]:
        try:
            BatchMetrics.from_json(raw)  # type: ignore[arg-type]
        except MalformedMetrics as problem:
            assert says in str(problem), (raw, problem)
        else:
            raise AssertionError(f"{raw!r} parsed")


def test_a_good_record_round_trips():
    good = BatchMetrics("s", 3, 2, 1, 10.5, per_channel=[ChannelMetrics(channel=0, records=4, probe_latency_ms=[1.0])])
    assert BatchMetrics.from_json(good.to_json()) == good
