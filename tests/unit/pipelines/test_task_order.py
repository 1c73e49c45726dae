"""The order of a stage's tasks: channels new in a layout start first, and the placement labels put
each channel's rows in the partition of its place in that order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elasticity.layout import Layout
from pipelines.elastic_stage import ordered_placement, placement_labels, task_order


def test_a_scale_out_starts_the_new_channels_first() -> None:
    before = Layout.uniform(4)
    after = before.scale_out(2)
    new = [c for c in after.channels if c not in before.channels]
    assert task_order(after, before.channels) == [*new, *before.channels]


def test_a_scale_in_and_a_first_layout_keep_the_layouts_order() -> None:
    before = Layout.uniform(4)
    after = before.scale_in(1)
    assert task_order(after, before.channels) == list(after.channels)
    assert task_order(before, []) == list(before.channels)


@given(channels=st.integers(2, 12), added=st.integers(0, 6), removed=st.integers(1, 11))
def test_new_channels_precede_carried_ones_in_a_permutation(channels: int, added: int, removed: int) -> None:
    before = Layout.uniform(channels)
    after = before.scale_out(added) if added else before.scale_in(min(removed, channels - 1))
    order = task_order(after, before.channels)
    assert sorted(order) == sorted(after.channels)
    carried = [c in before.channels for c in order]
    assert carried == sorted(carried)  # every new channel (False) before every carried one


def test_the_placement_puts_each_channel_in_its_place_in_the_order() -> None:
    before = Layout.uniform(4)
    after = before.scale_out(1)
    labels = placement_labels(after.n_channels)
    order = task_order(after, before.channels)
    placement = ordered_placement(after, labels, order)
    for dense, channel in enumerate(after.channels):
        assert placement[dense] == labels[order.index(channel)]


def test_an_order_of_other_channels_is_refused() -> None:
    layout = Layout.uniform(3)
    with pytest.raises(ValueError, match="not an order of the layout's channels"):
        ordered_placement(layout, placement_labels(3), [0, 1, 7])
