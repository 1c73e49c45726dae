"""Shared helper of the store tests that check a store against a dict model."""

from __future__ import annotations

from collections.abc import Sequence

from elasticity.state import StateStore


def write_with_model(store: StateStore, batch_id: int, writes: Sequence[tuple[str, int | None]], model: dict) -> None:
    """Commit batch `batch_id` of puts (None: delete) to `store`, and the same to `model`."""
    with store.begin(batch_id) as tx:
        for key, value in writes:
            if value is None:
                tx.delete(key)
                model.pop(key, None)
            else:
                tx.put(key, value)
                model[key] = value
