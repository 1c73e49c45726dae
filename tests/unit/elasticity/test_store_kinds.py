"""The registry of state-store kinds: its name type agrees with it, and every kind keeps its
durable history in the one layout the driver's `HistoryBackend` reads (the migration and the
snapshot writer rely on that). The shared store suite (`conftest`) runs every kind as well."""

from __future__ import annotations

from typing import get_args

import pytest

from elasticity.state import BytesCodec, HistoryBackend
from elasticity.state.kinds import STORE_KINDS, StoreKind, build_backend, describe_store_kinds, store_kind_named


def test_the_kind_names_and_the_registry_agree() -> None:
    assert list(get_args(StoreKind)) == list(STORE_KINDS)


def test_every_kind_has_a_one_line_description_in_the_help_text() -> None:
    for name, info in STORE_KINDS.items():
        assert info.description and "\n" not in info.description, name
        assert f"{name}: {info.description}" in describe_store_kinds()


@pytest.mark.parametrize("kind", list(STORE_KINDS))
def test_a_kind_history_is_what_the_driver_reads(kind: StoreKind, tmp_path) -> None:
    durable, local = str(tmp_path / "durable"), str(tmp_path / "local")
    backend = build_backend(kind, BytesCodec(), durable, local)
    with backend.open(3).begin(0) as tx:
        tx.put("k", b"\x00encoded")
    backend.close()

    driver = HistoryBackend(BytesCodec(), durable=durable)
    assert driver.channels() == [3]
    assert driver.open(3).get("k") == b"\x00encoded"
    reopened = build_backend(kind, BytesCodec(), durable, local)
    assert reopened.open(3).get("k") == b"\x00encoded"
    reopened.close()


def test_an_unknown_kind_is_refused_by_name(tmp_path) -> None:
    with pytest.raises(KeyError, match="lmdb"):
        build_backend("lmdb", BytesCodec(), str(tmp_path), str(tmp_path))  # type: ignore[arg-type]


def test_a_kind_named_on_the_command_line_is_checked_against_the_registry() -> None:
    assert [store_kind_named(name) for name in STORE_KINDS] == list(STORE_KINDS)
    with pytest.raises(ValueError, match="unknown store kind 'lmdb'.*rocks, memory, columnar"):
        store_kind_named("lmdb")
