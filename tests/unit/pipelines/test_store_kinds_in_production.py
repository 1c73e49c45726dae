"""The stream spec and the executors' working sets take their store kinds from the registry
(`elasticity.state.kinds`): every registered kind is accepted, described and opened."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from elasticity.state import Location
from elasticity.state.kinds import STORE_KINDS, StoreKind
from pipelines.elastic_stage import StageSpec, WorkerStores
from pipelines.streams.spec import StreamSpec


def test_the_stream_spec_accepts_and_describes_exactly_the_registered_kinds(tmp_path) -> None:
    for kind in STORE_KINDS:
        assert StreamSpec(root=str(tmp_path), store_kind=kind).store_kind == kind
    with pytest.raises(ValidationError, match="store_kind"):
        StreamSpec(root=str(tmp_path), store_kind="lmdb")
    description = StreamSpec.model_fields["store_kind"].description or ""
    assert all(f"{kind}: {info.description}" in description for kind, info in STORE_KINDS.items())


@pytest.mark.parametrize("kind", list(STORE_KINDS))
def test_worker_stores_open_every_kind_and_keep_the_operator_bytes(kind: StoreKind, tmp_path) -> None:
    durable = tmp_path / "durable"
    Location.of(str(durable)).ensure()
    spec = StageSpec("s", str(durable), str(tmp_path / "local"), store_kind=kind)
    stores = WorkerStores(spec)
    with stores.store_for(0, 1, frozenset(), frozenset({0})).begin(0) as tx:
        tx.put("k", b"\x01bytes")
    for entry in stores.cached.values():
        entry.store.close()
    reopened = WorkerStores(spec).store_for(0, 1, frozenset(), frozenset({0}))  # a new worker process
    assert reopened.get("k") == b"\x01bytes"
    reopened.close()
