"""The records cap at a batch boundary (`CapSwitch`): without admission control, a per-channel cap
that a rescale changed swaps the query, and an unchanged one never does; a waiting rescale request
sets the cap of the batch that applies it (`channels_asked`)."""

from __future__ import annotations

from elasticity.layout import Layout
from pipelines.streams.cap_switch import CapSwitch
from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleTarget
from pipelines.streams.metrics import BatchMetrics
from pipelines.streams.rescaling import channels_asked
from tests.fakes.spark_checkpoint import write_checkpoint


def _metrics(batch_id: int, channels: int) -> BatchMetrics:
    return BatchMetrics(stream="s", batch_id=batch_id, epoch=0, channels=channels, wall_time=0.0)


def _switch(tmp_path, channels: list[int], per_channel: int = 1_500) -> CapSwitch:
    """A switch whose wanted cap follows `channels[0]` (a rescale changes it), no admission gate."""
    switch = CapSwitch(None, str(tmp_path / "checkpoint"), "words", lambda n: per_channel * n, adjustable=True)
    switch.query_cap = per_channel * channels[0]  # as the runner does when it starts the query
    return switch


def test_an_unchanged_cap_lets_the_next_batch_run(tmp_path):
    switch = _switch(tmp_path, [2])
    switch.after_batch(_metrics(7, 2))
    assert not switch.refusing.is_set()
    assert not switch.wait_for_change(0.01)


def test_a_rescale_that_changes_the_per_channel_cap_swaps_the_query_after_its_batch(tmp_path):
    channels = [1]
    switch = _switch(tmp_path, channels)
    channels[0] = 8  # the batch applied a 1 -> 8 rescale
    switch.after_batch(_metrics(4, 8))
    assert switch.refusing.is_set(), "the next batch would run under one channel's cap"
    assert switch.decided_by_batch == 4
    assert switch.wait_for_change(0.01)


def test_a_swapped_query_reports_its_pause_on_the_next_batch(tmp_path):
    switch = _switch(tmp_path, [1])
    switch.restart_ms, switch.new_query = 120.0, True
    metrics = _metrics(5, 1)
    switch.after_batch(metrics)
    assert metrics.query_restart_ms == 120.0
    assert switch.restart_ms is None and not switch.new_query


def test_every_batch_reports_the_kafka_records_it_admitted_even_without_a_cap(tmp_path):
    # The elasticity collector's records per Kafka record comes from these, batch by batch.
    checkpoint = write_checkpoint(tmp_path / "checkpoint", "words", [{0: 10, 1: 5}, {0: 110, 1: 55}], committed=1)
    switch = CapSwitch(None, checkpoint, "words", lambda n: None, adjustable=False)
    metrics = _metrics(1, 2)
    switch.after_batch(metrics)
    assert metrics.admitted_records == 150
    assert not switch.refusing.is_set()


def test_the_batch_after_a_rescale_request_is_capped_for_the_layout_it_asks_for(tmp_path):
    # The next batch applies the waiting request: a 1 -> 3 scale-out's first batch gets three
    # channels' cap, not the one channel's the old layout leaves.
    control, current = ControlChannel(str(tmp_path / "control")), Layout.uniform(1, epoch=4)
    assert channels_asked(control, current) is None  # nothing waits
    control.request(RescaleRequest(target=RescaleTarget(op="scale_to", channels=3), base_epoch=4))
    assert channels_asked(control, current) == 3
    assert channels_asked(control, current) == 3, "read, not taken: the boundary still applies it"


def test_a_request_the_boundary_will_refuse_leaves_the_cap_as_it_is(tmp_path):
    control, current = ControlChannel(str(tmp_path / "control")), Layout.uniform(2, epoch=4)
    control.request(RescaleRequest(target=RescaleTarget(op="scale_to", channels=3), base_epoch=3))
    assert channels_asked(control, current) is None  # stale: planned on epoch 3
    stale = ControlChannel(str(tmp_path / "other"))
    stale.request(RescaleRequest(target=RescaleTarget(op="scale_to", channels=2)))
    assert channels_asked(stale, current) is None  # already 2 channels: no layout to go to
