"""Executors that follow channels: how many a layout gets, which ones a scale-in releases, what a
batch reports about where its channels ran, and the settings' bounds (the cluster test checks the
same against a real standalone master)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.settings import EspSettings, ExecutorScalingSettings, SettingsError
from pipelines.streams.executors import surplus_executors
from pipelines.streams.metrics import BatchMetrics, ChannelMetrics, RebuildReport

TWO_PER_EXECUTOR = ExecutorScalingSettings(
    follow_channels=True, channels_per_executor=2, min_executors=1, max_executors=2
)


@pytest.mark.parametrize(("channels", "executors"), [(1, 1), (2, 1), (3, 2), (4, 2), (8, 2)])
def test_two_channels_per_executor_within_one_to_two(channels, executors):
    assert TWO_PER_EXECUTOR.executors_for(channels) == executors


@given(
    channels=st.integers(1, 1000),
    per=st.integers(1, 16),
    low=st.integers(1, 8),
    extra=st.integers(0, 8),
)
def test_the_target_is_within_bounds_and_serves_every_channel_it_can(channels, per, low, extra):
    scaling = ExecutorScalingSettings(channels_per_executor=per, min_executors=low, max_executors=low + extra)
    target = scaling.executors_for(channels)
    assert scaling.min_executors <= target <= scaling.max_executors
    if target < scaling.max_executors:
        assert target * per >= channels  # enough executors for every channel
    if target > scaling.min_executors:
        assert (target - 1) * per < channels  # and not one more than needed


def test_a_scale_in_releases_the_executors_that_served_fewest_channels():
    served = Counter({"0": 3, "1": 0, "2": 1})
    assert surplus_executors(["0", "1", "2"], served, 1) == ["1", "2"]
    assert surplus_executors(["0", "1", "2"], served, 2) == ["1"]
    assert surplus_executors(["0", "1", "2"], served, 3) == []


def test_among_equally_used_executors_the_newest_goes_first():
    assert surplus_executors(["3", "10", "4"], Counter(), 2) == ["10"]


def _batch(batch_id: int, executors: dict[int, str | None], rebuilt: set[int] = frozenset()) -> BatchMetrics:
    rebuild = RebuildReport(snapshot_entries=10, snapshot_bytes=4096, restore_ms=1.0, changelog_entries=2, fold_ms=1.0)
    per_channel = [
        ChannelMetrics(channel, executor=executor, rebuild=rebuild if channel in rebuilt else None)
        for channel, executor in executors.items()
    ]
    return BatchMetrics("s", batch_id, 1, len(per_channel), 0.0, per_channel=per_channel)


def test_a_batch_counts_the_channels_that_changed_executor_and_what_their_rebuilds_read():
    before = _batch(1, {0: "0", 1: "0", 2: "1", 3: "1"})
    after = _batch(2, {0: "0", 1: "1", 2: "1", 3: "0"}, rebuilt={1, 3})
    assert [c.channel for c in after.moved_since(before)] == [1, 3]
    assert after.rebuilt_channels == 2 and after.rebuild_bytes == 8192
    assert after.served_by_executor() == Counter({"0": 2, "1": 2})


def test_where_channels_ran_is_unknown_without_executors_or_a_previous_batch():
    local = _batch(2, {0: None, 1: None})
    assert local.moved_since(_batch(1, {0: None, 1: None})) is None
    assert _batch(2, {0: "0"}).moved_since(None) is None
    assert local.served_by_executor() == Counter()


def test_the_executor_fields_survive_the_metrics_topic():
    batch = _batch(7, {0: "0", 1: "1"}, rebuilt={1})
    batch.executors, batch.executors_target, batch.channels_moved, batch.moved_open_ms = 2, 2, 1, 12.5
    parsed = BatchMetrics.from_json(batch.to_json())
    assert (parsed.executors, parsed.executors_target, parsed.channels_moved, parsed.moved_open_ms) == (2, 2, 1, 12.5)
    assert [c.executor for c in parsed.per_channel] == ["0", "1"]
    assert parsed.rebuild_bytes == 4096


def test_bounds_out_of_order_are_refused_naming_both():
    with pytest.raises(SettingsError, match=r"min_executors \(3\) exceeds max_executors \(2\)"):
        EspSettings.load(spark={"executors": {"min_executors": 3, "max_executors": 2}})
