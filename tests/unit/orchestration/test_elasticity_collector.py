"""The collector: metrics + offsets -> MetricsSnapshot, with the channel-id mapping made explicit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from elasticity.control import CommittedLayout, Decision
from orchestration.elasticity.collector import ChannelMap, NotReady, RecentArrivals, collect
from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.elasticity.realizer import target_for
from tests.fakes.elasticity_stream import FakeStream

POLICY = ElasticityPolicy(slo_s=5.0, sample_period_s=10.0, probe_timeout_s=15.0)


def test_channel_map_maps_sparse_ids_to_dense_indices_and_back():
    channels = ChannelMap((0, 2, 5))
    assert [channels.index_of(c) for c in (0, 2, 5)] == [0, 1, 2]
    assert [channels.channel_at(i) for i in range(3)] == [0, 2, 5]
    with pytest.raises(KeyError):
        channels.index_of(1)
    with pytest.raises(ValueError):
        ChannelMap((2, 0))


def test_no_metrics_is_not_ready_with_a_reason():
    with pytest.raises(NotReady, match="no metrics yet"):
        collect(FakeStream().read(), None, POLICY)


def test_per_channel_values_land_at_the_index_of_their_channel_id():
    stream = FakeStream(channels=(0, 2, 5))
    stream.run(10, 600, {0: 0.5, 2: 0.7, 5: 9.0}, shares={0: 0.2, 2: 0.3, 5: 0.5})
    collected = collect(stream.read(), None, POLICY)
    assert collected.channels.channel_ids == (0, 2, 5)
    assert collected.snapshot.channels == 3
    # Channel 5 (index 2) is the slow and busy one.
    np.testing.assert_allclose(collected.snapshot.probe_latency_s, [0.5, 0.7, 9.0], atol=1.1)
    assert int(np.argmax(collected.snapshot.probe_latency_s)) == 2
    np.testing.assert_allclose(collected.snapshot.throughput_rps, [120, 180, 300], rtol=0.05)


def test_busy_share_and_top_key_share_per_channel():
    stream = FakeStream(channels=(0, 3, 7))
    stream.run(10, 500, 2.0, shares={0: 0.2, 3: 0.2, 7: 0.6}, service_ms=2.0, top_key_share=0.25)
    snapshot = collect(stream.read(), None, POLICY).snapshot
    # Channel 7 processes 300 records/s at 2 ms each: busy 60% of the time; the others 20%.
    np.testing.assert_allclose(snapshot.busy_share, [0.2, 0.2, 0.6], rtol=0.02)
    np.testing.assert_allclose(snapshot.top_key_share, [0.25, 0.25, 0.25], rtol=0.02)


def test_a_channel_whose_probes_stay_missing_times_out_while_the_others_return():
    stream = FakeStream(channels=(0, 1, 2)).run(10, 300, 0.4)
    stream.run(20, 300, 0.4, silent=[1])
    collected = collect(stream.read(), None, POLICY)
    assert collected.snapshot.probe_timed_out.tolist() == [False, True, False]
    assert collected.snapshot.probe_latency_s[1] > POLICY.probe_timeout_s


def test_a_stream_stuck_in_a_long_batch_reports_every_channel_late():
    stream = FakeStream(channels=(0, 1)).run(10, 300, 0.4).stall(40, 300)
    collected = collect(stream.read(), None, POLICY)
    assert collected.snapshot.probe_timed_out.all()
    assert (collected.snapshot.probe_latency_s >= 38).all()
    # Throughput falls back to the last finished batch, not to zero: capacity stays measurable.
    assert collected.snapshot.total_throughput_rps == pytest.approx(300, rel=0.05)


def test_only_the_newest_layout_epoch_counts():
    stream = FakeStream(channels=(0, 1)).run(10, 300, 9.0)
    stream.relayout((0, 1, 2)).run(4, 300, 0.3)
    collected = collect(stream.read(), None, POLICY)
    assert collected.epoch == 1
    assert collected.channels.channel_ids == (0, 1, 2)
    assert (collected.snapshot.probe_latency_s < 2).all()


def test_metrics_of_a_layout_older_than_the_committed_one_await_it():
    stream = FakeStream(channels=(0, 1)).run(10, 300, 9.0).commit_layout((0, 1, 2))
    collected = collect(stream.read(), None, POLICY)
    # The old layout's metrics, naming the committed layout they are no evidence of.
    assert collected.epoch == 0 and collected.channels.channel_ids == (0, 1)
    assert collected.snapshot.awaited == CommittedLayout(epoch=1, channels=3)
    stream.relayout((0, 1, 2)).run(2, 300, 0.5)
    collected = collect(stream.read(), None, POLICY)
    assert collected.epoch == 1 and collected.snapshot.awaited is None


def test_without_the_committed_channel_count_an_older_layouts_metrics_are_not_decided_on():
    stream = FakeStream(channels=(0, 1)).run(10, 300, 9.0).commit_layout()
    with pytest.raises(NotReady, match="waiting for the first batch of layout epoch 1"):
        collect(stream.read(), None, POLICY)


def test_input_rate_and_lag_come_from_offsets_in_stage_records():
    # Three stage records (words) per Kafka record (line): rate and lag are converted to words.
    stream = FakeStream(channels=(0, 1), records_per_offset=3.0).run(10, 600, 0.5, lag_records=300)
    first = collect(stream.read(), None, POLICY)
    stream.run(10, 1200, 0.5, lag_records=300)
    second = collect(stream.read(), first.offsets, POLICY)
    assert second.offsets.records_per_offset == pytest.approx(3.0, rel=0.05)
    assert second.snapshot.input_rate_rps == pytest.approx(1200, rel=0.05)
    assert second.snapshot.total_lag_records == pytest.approx(300, rel=0.05)
    assert second.snapshot.lag_records.size == 2


def test_decisions_name_layout_channel_ids_not_snapshot_indices():
    channels = ChannelMap((0, 3, 7))
    split = Decision(time_s=0, action="split", from_channels=3, to_channels=4, channel=2, rule="split", reason="hot")
    merge = Decision(time_s=0, action="merge", from_channels=3, to_channels=2, channel=1, rule="merge", reason="light")
    scale = Decision(time_s=0, action="scale_out", from_channels=3, to_channels=6, rule="P1", reason="busy")
    assert (target_for(split, channels).op, target_for(split, channels).channel) == ("split", 7)
    assert (target_for(merge, channels).op, target_for(merge, channels).channel) == ("merge", 3)
    assert (target_for(scale, channels).op, target_for(scale, channels).channels) == ("scale_to", 6)


def test_one_period_whose_batch_ends_after_the_tick_does_not_halve_the_input_rate():
    """A long batch consumed its offsets before the tick but reports its records after it: that
    period alone reads half the records per offset. Pooled with the earlier periods' evidence,
    the input rate stays near the truth (one period's ratio would report about half of it). A
    stream whose batches do not report what they admitted (before this version)."""
    stream = FakeStream(channels=(0, 1), records_per_offset=3.0, reports_admitted=False).run(10, 600, 0.5)
    tick = collect(stream.read(), None, POLICY)
    for _ in range(3):
        stream.run(10, 600, 0.5)
        tick = collect(stream.read(), tick.offsets, POLICY)
    stream.run(10, 600, 0.5)
    reading = stream.read()
    late = reading.metrics[-1].wall_time - 5.0  # the last 5 s of batches have not reported yet
    reading = replace(reading, metrics=[m for m in reading.metrics if m.wall_time <= late])
    assert collect(reading, tick.offsets, POLICY).snapshot.input_rate_rps == pytest.approx(600, rel=0.2)


def test_a_batch_reported_before_its_commit_does_not_skew_the_records_per_offset():
    """A batch's metrics are published before its commit: the tick can count a big batch's records
    while the committed offsets still end before it (as when a backlog's batches change size).
    Matched batch by batch with what each admitted, the ratio stays the truth; the offsets'
    advance would read three times it here."""
    stream = FakeStream(channels=(0, 1), records_per_offset=3.0).run(10, 600, 0.5)
    tick = collect(stream.read(), None, POLICY)
    stream.run(10, 600, 0.5)
    committed_before = dict(stream.consumed)
    stream.run(2, 6000, 0.5)  # one batch of 12,000 records, not yet committed
    reading = replace(stream.read(), consumed_offsets=committed_before)
    assert collect(reading, tick.offsets, POLICY).offsets.records_per_offset == pytest.approx(3.0, rel=0.01)


def test_recent_arrivals_give_the_last_seconds_rate_in_stage_records():
    """The period's rate averages a rise with what came before it; the recent window does not."""
    stream = FakeStream(channels=(0, 1), records_per_offset=3.0).run(10, 150, 0.5)
    tick = collect(stream.read(), None, POLICY)
    stream.run(10, 150, 0.5)
    reading = stream.read()
    assert collect(reading, tick.offsets, POLICY).recent_input_rate_rps is None  # not read: unknown
    # 400 lines reached the input topic in the last 2 s (two partitions), i.e. 600 words/s.
    starts = {p: end - 200 for p, end in reading.end_offsets.items()}
    recent = collect(replace(reading, arrivals=RecentArrivals(2.0, starts)), tick.offsets, POLICY)
    assert recent.recent_input_rate_rps == pytest.approx(600, rel=0.05)
    assert recent.snapshot.input_rate_rps == pytest.approx(150, rel=0.05)
    assert recent.snapshot.current_input_rate_rps == pytest.approx(600, rel=0.05)  # what the controller asks


def test_a_partition_without_recent_records_adds_nothing():
    arrivals = RecentArrivals(2.0, {0: 100, 1: 50})
    assert arrivals.offsets_per_second({0: 100, 1: 60, 2: 7}) == pytest.approx(5.0)


def test_the_batch_cycle_is_the_time_between_batch_ends_or_the_running_batch_if_longer():
    stream = FakeStream(channels=(0, 1)).run(20, 300, 0.4, batch_s=2.5)
    assert collect(stream.read(), None, POLICY).snapshot.batch_cycle_s == pytest.approx(2.5)
    # A batch running 30 s and not done: every record it holds is in flight for that long.
    stream.stall(30, 300)
    assert collect(stream.read(), None, POLICY).snapshot.batch_cycle_s == pytest.approx(30.0)
    # One batch, nothing before it to measure from.
    single = FakeStream(channels=(0,)).run(2, 300, 0.4, batch_s=2.0)
    assert collect(single.read(), None, POLICY).snapshot.batch_cycle_s is None
