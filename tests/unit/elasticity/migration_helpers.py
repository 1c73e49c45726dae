"""Shared helpers for the migration tests: fill a stage's state, and check the invariants
(one committed layout, every key owned exactly once by its owner, values intact)."""

from __future__ import annotations

from elasticity.hashing import hash_str
from elasticity.layout import Layout
from elasticity.migration import LayoutRegistry
from elasticity.state import Location, StoreBackend


def populate(backend: StoreBackend, layout: Layout, n_keys: int, batches: int = 2) -> dict[str, int]:
    """Write keys over a few batches, each to its owner; return the expected key -> value."""
    expected: dict[str, int] = {}
    for batch in range(batches):
        by_channel: dict[int, dict[str, int]] = {}
        for i in range(batch, n_keys, batches):
            key = f"word-{i}-é" if i % 7 == 0 else f"word-{i}"
            value = i * 10 + batch
            by_channel.setdefault(layout.owner(hash_str(key)), {})[key] = value
            expected[key] = value
        for channel in layout.channels:
            with backend.open(channel).begin(batch) as tx:
                for key, value in by_channel.get(channel, {}).items():
                    tx.put(key, value)
    return expected


def placement(backend: StoreBackend, channels: tuple[int, ...]) -> dict[int, dict[str, int]]:
    return {c: dict(backend.open(c).items()) for c in channels}


def assert_owned_exactly_once(backend: StoreBackend, root: str, expected: dict[str, int]) -> Layout:
    """The invariants after any migration or recovery; returns the committed layout."""
    registry = LayoutRegistry(Location.of(root))
    assert registry.pending() is None, "a migration is still pending"
    layout = registry.routing_layout()
    seen: dict[str, int] = {}
    for channel in layout.channels:
        entries = backend.open(channel).entries()
        owners = layout.lookup(entries["hash"].to_numpy())
        assert (owners == channel).all(), f"channel {channel} holds keys it does not own"
        for key, value in backend.open(channel).items():
            assert key not in seen, f"{key} is held twice"
            seen[key] = value
    assert seen == expected
    stray = set(backend.channels()) - set(layout.channels)
    assert not stray, f"channels {stray} are not in the committed layout but have state"
    return layout
