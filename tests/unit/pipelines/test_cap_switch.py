"""The records cap at a batch boundary (`CapSwitch`): without admission control, a per-channel cap
that a rescale changed swaps the query, and an unchanged one never does."""

from __future__ import annotations

from pipelines.streams.cap_switch import CapSwitch
from pipelines.streams.metrics import BatchMetrics
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
