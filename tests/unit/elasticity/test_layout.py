"""Layout properties: balance, minimal and monotone movement, exact diffs, serialization."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticity.hashing import hash_int64_array
from elasticity.layout import (
    DEFAULT_TOKENS_PER_CHANNEL,
    HASH_SPACE,
    INT64_MAX,
    INT64_MIN,
    Layout,
    LayoutError,
    diff,
    moved_space_fraction,
)
from elasticity.migration import MigrationPlan

TOLERANCE = 0.15


def random_hashes(seed: int, n: int) -> np.ndarray:
    keys = np.random.default_rng(seed).integers(INT64_MIN, INT64_MAX, size=n, dtype=np.int64, endpoint=True)
    return hash_int64_array(keys)


@pytest.fixture(scope="module")
def million_hashes() -> np.ndarray:
    # Sorted: balance does not depend on order, and sorted lookups are cache-friendly (fast test).
    return np.sort(random_hashes(2024, 1_000_000))


def max_over_mean(layout: Layout, hashes: np.ndarray) -> float:
    counts = np.bincount(layout.lookup_partitions(hashes), minlength=layout.n_channels)
    return counts.max() / counts.mean()


def test_uniform_layout_gives_every_channel_an_exact_share() -> None:
    for n in (1, 2, 3, 7, 64):
        shares = Layout.uniform(n).shares()
        assert sorted(shares) == list(range(n))
        assert max(abs(s - 1 / n) for s in shares.values()) < 1e-15


def test_default_tokens_balance_one_million_keys_for_every_n(million_hashes) -> None:
    grown = Layout.uniform(1)
    for n in range(1, 65):
        assert max_over_mean(Layout.uniform(n), million_hashes) <= 1.10, n
        assert max_over_mean(grown, million_hashes) <= 1.10, n  # reached by scaling out 1 -> n
        grown = grown.scale_out(1)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 64), seed=st.integers(0, 2**32), size=st.integers(50_000, 120_000))
def test_scale_out_moves_about_one_over_n_plus_one_and_only_to_the_new_channel(n, seed, size) -> None:
    hashes = random_hashes(seed, size)
    old = Layout.uniform(n)
    new = old.scale_out(1)
    before, after = old.lookup(hashes), new.lookup(hashes)
    moved = before != after
    (added,) = new.origin["added"]
    assert set(np.unique(after[moved])) <= {added}
    assert abs(moved.mean() / (1 / (n + 1)) - 1) <= TOLERANCE


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 64), seed=st.integers(0, 2**32), k=st.integers(1, 3))
def test_scale_in_moves_only_the_removed_channels_keys(n, seed, k) -> None:
    hashes = random_hashes(seed, 30_000)
    big = Layout.uniform(n).scale_out(k)
    small = big.scale_in(k)
    removed = set(big.channels) - set(small.channels)
    assert len(removed) == k and small.n_channels == n
    before, after = big.lookup(hashes), small.lookup(hashes)
    moved = before != after
    assert np.array_equal(moved, np.isin(before, list(removed)))
    assert abs(max(small.shares().values()) * n - 1) < 1e-9  # still balanced


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 64), data=st.data(), fraction=st.floats(0.1, 0.9))
def test_targeted_split_moves_keys_only_out_of_the_split_channel(n, data, fraction) -> None:
    old = Layout.uniform(n)
    hot = data.draw(st.sampled_from(old.channels))
    new = old.split(hot, fraction)
    hashes = random_hashes(data.draw(st.integers(0, 2**32)), 40_000)
    before, after = old.lookup(hashes), new.lookup(hashes)
    moved = before != after
    (added,) = new.origin["added"]
    assert set(np.unique(before[moved])) <= {hot}
    assert set(np.unique(after[moved])) <= {added}
    new_shares, old_shares = new.shares(), old.shares()
    assert abs(new_shares[added] - fraction * old_shares[hot]) < 1e-12
    assert all(new_shares[c] == old_shares[c] for c in old.channels if c != hot)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 64), data=st.data())
def test_merge_moves_only_the_merged_channels_keys(n, data) -> None:
    old = Layout.uniform(n)
    gone = data.draw(st.sampled_from(old.channels))
    into = data.draw(st.one_of(st.none(), st.sampled_from([c for c in old.channels if c != gone])))
    new = old.merge(gone, into)
    assert gone not in new.channels
    hashes = random_hashes(data.draw(st.integers(0, 2**32)), 20_000)
    before, after = old.lookup(hashes), new.lookup(hashes)
    moved = before != after
    assert np.array_equal(moved, before == gone)
    if into is not None:
        assert set(np.unique(after[moved])) <= {into}


def test_merge_without_target_goes_to_ring_successors() -> None:
    old = Layout.uniform(4, tokens_per_channel=2)  # arcs owned 0,1,2,3,0,1,2,3
    new = old.merge(1)
    assert {(r.source, r.target) for r in diff(old, new)} == {(1, 2)}
    last = Layout.uniform(3, tokens_per_channel=1).merge(2)  # the last arc wraps to the first
    assert {(r.source, r.target) for r in diff(Layout.uniform(3, tokens_per_channel=1), last)} == {(2, 0)}


operations = st.lists(
    st.tuples(st.sampled_from(["out", "in", "split", "merge", "merge_into"]), st.integers(0, 10**6), st.integers(1, 3)),
    min_size=1,
    max_size=12,
)


def apply_random(layout: Layout, op: str, pick: int, k: int) -> Layout:
    channels = layout.channels
    if op == "out" or layout.n_channels == 1:
        return layout.scale_out(k)
    if op == "in":
        return layout.scale_in(min(k, layout.n_channels - 1))
    chosen = channels[pick % len(channels)]
    if op == "split":
        return layout.split(chosen)
    if op == "merge":
        return layout.merge(chosen)
    others = [c for c in channels if c != chosen]
    return layout.merge(chosen, into=others[pick % len(others)])


@settings(max_examples=40, deadline=None)
@given(start=st.integers(1, 16), ops=operations, seed=st.integers(0, 2**32))
def test_diff_is_exactly_the_set_of_keys_that_change_owner(start, ops, seed) -> None:
    hashes = np.concatenate([random_hashes(seed, 20_000), np.array([INT64_MIN, INT64_MAX, -1, 0], dtype=np.int64)])
    layout = Layout.uniform(start)
    for op, pick, k in ops:
        new = apply_random(layout, op, pick, k)
        assert new.epoch == layout.epoch + 1
        ranges = diff(layout, new)
        # Ranges are sorted, disjoint and inclusive.
        assert all(a.end < b.start for a, b in zip(ranges, ranges[1:]))
        assert all(r.source != r.target and r.start <= r.end for r in ranges)
        # Replaying the ranges over the old owners gives exactly the new owners.
        expected = layout.lookup(hashes).copy()
        for r in ranges:
            inside = (hashes >= r.start) & (hashes <= r.end)
            assert (expected[inside] == r.source).all()
            expected[inside] = r.target
        assert np.array_equal(expected, new.lookup(hashes))
        # Monotone: nothing moves between channels present in both layouts.
        assert MigrationPlan.between(layout, new).unexpected_moves() == []
        # Space is conserved: every hash has exactly one owner.
        assert sum(new.shares().values()) == pytest.approx(1.0, abs=1e-12)
        assert abs(moved_space_fraction(ranges) * HASH_SPACE - sum(r.size for r in ranges)) < 1e-3 * HASH_SPACE
        layout = new


@settings(max_examples=25, deadline=None)
@given(start=st.integers(1, 16), ops=operations)
def test_layouts_roundtrip_through_json(start, ops) -> None:
    layout = Layout.uniform(start)
    for op, pick, k in ops:
        layout = apply_random(layout, op, pick, k)
        again = Layout.from_json(layout.to_json())
        assert again == layout
        assert again.to_json() == layout.to_json()


@settings(max_examples=25, deadline=None)
@given(start=st.integers(2, 16), ops=operations)
def test_partition_indices_are_dense_and_follow_channel_order(start, ops) -> None:
    layout = Layout.uniform(start)
    for op, pick, k in ops:
        layout = apply_random(layout, op, pick, k)
    mapping = layout.partition_map()
    assert sorted(mapping.values()) == list(range(layout.n_channels))
    assert [mapping[c] for c in layout.channels] == list(range(layout.n_channels))
    hashes = random_hashes(7, 5_000)
    assert np.array_equal(layout.lookup_partitions(hashes), np.array([mapping[int(c)] for c in layout.lookup(hashes)]))


def test_owner_matches_vectorized_lookup_at_the_edges() -> None:
    layout = Layout.uniform(5).split(2).merge(0)
    probes = [INT64_MIN, INT64_MAX, 0, -1, *[int(b) for b in layout.bounds], *[int(b) + 1 for b in layout.bounds[:-1]]]
    assert [layout.owner(p) for p in probes] == list(layout.lookup(np.array(probes, dtype=np.int64)))


def test_default_tokens_per_channel_is_used_by_uniform() -> None:
    assert len(Layout.uniform(3).bounds) == 3 * DEFAULT_TOKENS_PER_CHANNEL


def test_invalid_operations_are_refused() -> None:
    single = Layout.uniform(1)
    with pytest.raises(LayoutError):
        single.merge(0)
    with pytest.raises(LayoutError):
        single.scale_in(1)
    with pytest.raises(LayoutError):
        Layout.uniform(3).split(7)
    with pytest.raises(LayoutError):
        Layout.uniform(3).merge(1, into=1)
    with pytest.raises(LayoutError):
        Layout.uniform(3).split(1, fraction=1.0)
    with pytest.raises(LayoutError):
        Layout(0, [1, 2], [0, 1])  # does not reach INT64_MAX
    with pytest.raises(LayoutError):
        Layout.from_dict({"format": "something-else"})


def test_new_channels_reuse_the_lowest_free_ids() -> None:
    layout = Layout.uniform(4).merge(1)
    assert layout.channels == (0, 2, 3)
    assert layout.partition_of(3) == 2
    assert layout.scale_out(2).origin["added"] == [1, 4]
