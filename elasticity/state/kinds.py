"""The registry of state-store kinds: which kinds of channel store a stream can run on, what
each is, and how to build its `StoreBackend`. One place, read by the stream spec (which kinds
it accepts), by production (the executors' working sets, the offline rescale) and by the
shared store test suite (which runs every kind here).

A kind's factory takes the value codec, the durable path or URI of the channels' histories
(`<durable>/channels/channel=<id>/`) and the folder of this process's local working copies (a
kind that keeps none ignores it). Adding a kind: an entry in `STORE_KINDS` and its name in
`StoreKind` (a unit test checks that the two agree).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, Protocol

from elasticity.state.backend import ColumnarBackend, MemoryBackend, RocksBackend, StoreBackend
from elasticity.state.codecs import ValueCodec

StoreKind = Literal["rocks", "memory", "columnar"]
"""The name of a registered kind (the keys of `STORE_KINDS`)."""


class BackendFactory(Protocol):
    """Builds a kind's backend over the histories under `durable`, working copies under `local_dir`."""

    def __call__(self, codec: ValueCodec[Any], durable: str, local_dir: str) -> StoreBackend: ...


@dataclass(frozen=True)
class StoreKindInfo:
    """One registered kind: what it is (one line) and how to build its backend."""

    description: str
    build: BackendFactory


def _rocks(codec: ValueCodec[Any], durable: str, local_dir: str) -> StoreBackend:
    return RocksBackend(codec, durable=durable, local_dir=local_dir)


def _memory(codec: ValueCodec[Any], durable: str, local_dir: str) -> StoreBackend:
    return MemoryBackend(codec, durable=durable)  # no local copy: `local_dir` is not used


def _columnar(codec: ValueCodec[Any], durable: str, local_dir: str) -> StoreBackend:
    return ColumnarBackend(codec, durable=durable)  # no local copy: `local_dir` is not used


STORE_KINDS: Mapping[StoreKind, StoreKindInfo] = MappingProxyType(
    {
        "rocks": StoreKindInfo("RocksDB working sets in a local folder, for state larger than memory", _rocks),
        "memory": StoreKindInfo("in-memory working sets, for state that fits in the worker's memory", _memory),
        "columnar": StoreKindInfo(
            "in-memory Arrow working sets rebuilt and migrated without a per-key call, for state that fits in memory",
            _columnar,
        ),
    }
)
"""Every kind of channel store, by name; each keeps its durable history under the same layout."""


def build_backend(kind: StoreKind, codec: ValueCodec[Any], durable: str, local_dir: str) -> StoreBackend:
    """The backend of a registered kind (a KeyError names an unknown kind)."""
    return STORE_KINDS[kind].build(codec, durable, local_dir)


def store_kind_named(name: str) -> StoreKind:
    """The registered kind `name` (a command-line value); a ValueError lists the kinds."""
    for kind in STORE_KINDS:
        if kind == name:
            return kind
    raise ValueError(f"unknown store kind {name!r}; the kinds are: {', '.join(STORE_KINDS)}")


def describe_store_kinds() -> str:
    """Every kind and its one-line description, for help texts: `rocks: …; memory: …`."""
    return "; ".join(f"{name}: {info.description}" for name, info in STORE_KINDS.items())
