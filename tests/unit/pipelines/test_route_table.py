"""The route table the JVM searches: its binary search finds every hash's channel and placement label
as the layout's own lookup does, and layouts of up to 16 channels share one table size (one shape of
generated code across their rescales)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from elasticity.layout import Layout
from pipelines.elastic_stage import FANOUT, FANOUT_BITS, SEARCH_FLOOR, RouteTable, placement_labels

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    layout = Layout.uniform(draw(st.integers(1, 40)), tokens_per_channel=draw(st.sampled_from([1, 3, 16])))
    for _ in range(draw(st.integers(0, 3))):
        channel = draw(st.sampled_from(layout.channels))
        change = draw(st.sampled_from(["split", "merge", "out", "in"] if layout.n_channels > 1 else ["split", "out"]))
        if change == "split":
            layout = layout.split(channel, draw(st.floats(0.05, 0.95)))
        elif change == "merge":
            layout = layout.merge(channel)
        elif change == "out":
            layout = layout.scale_out(draw(st.integers(1, 3)))
        else:
            layout = layout.scale_in(1)
    return layout


@given(layout=layouts(), data=st.data())
def test_the_search_finds_each_hashs_channel_and_label(layout: Layout, data: st.DataObject) -> None:
    labels = placement_labels(layout.n_channels)
    table = RouteTable.of(layout, labels)
    bounds = [int(b) for b in layout.bounds]
    near_bounds = [b + d for b in bounds for d in (-1, 0, 1) if INT64_MIN <= b + d <= INT64_MAX]
    drawn = data.draw(st.lists(st.integers(INT64_MIN, INT64_MAX), max_size=50))
    for key_hash in [INT64_MIN, INT64_MAX, *near_bounds, *drawn]:
        arc = table.arc_of(key_hash)
        owner = layout.owner(key_hash)
        assert table.channels[arc] == owner, key_hash
        assert table.labels[arc] == labels[layout.partition_of(owner)], key_hash


@given(layout=layouts())
def test_the_table_is_a_power_of_the_fanout_of_at_least_the_floor(layout: Layout) -> None:
    table = RouteTable.of(layout, placement_labels(layout.n_channels))
    size = len(table.bounds)
    assert size >= max(SEARCH_FLOOR, len(layout.bounds))
    assert size == FANOUT ** ((size.bit_length() - 1) // FANOUT_BITS)  # a power of the fanout
    assert len(table.channels) == len(table.labels) == size
    assert list(table.bounds) == sorted(table.bounds)
    assert sum(stride * (FANOUT - 1) for stride in table.strides) == size - 1  # every arc reachable


def test_layouts_of_up_to_16_channels_share_one_table_size() -> None:
    sizes = {len(RouteTable.of(Layout.uniform(n), placement_labels(n)).bounds) for n in range(1, 17)}
    assert sizes == {SEARCH_FLOOR}
