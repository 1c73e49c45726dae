"""Value codecs: how a channel's user-defined state values become bytes and back.

Stores keep values as bytes (so changelogs, snapshots and migration files are type-agnostic
Arrow `binary` columns); each store is opened with the `ValueCodec` of its operator. esp ships
codecs for int64 counts, float64 sums, raw bytes and JSON structs (windowed aggregates, small
records); any object with `name`, `encode` and `decode` works.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

V = TypeVar("V")


@runtime_checkable
class ValueCodec(Protocol[V]):
    """Declared serialization of a state value; `decode(encode(v)) == v` must hold."""

    name: str

    def encode(self, value: V) -> bytes: ...

    def decode(self, data: bytes) -> V: ...


class Int64Codec:
    """Signed 64-bit integers (counts) as 8 little-endian bytes."""

    name = "int64"
    _fmt = struct.Struct("<q")

    def encode(self, value: int) -> bytes:
        return self._fmt.pack(value)

    def decode(self, data: bytes) -> int:
        return self._fmt.unpack(data)[0]


class Float64Codec:
    """IEEE-754 doubles (sums, averages' parts) as 8 little-endian bytes."""

    name = "float64"
    _fmt = struct.Struct("<d")

    def encode(self, value: float) -> bytes:
        return self._fmt.pack(value)

    def decode(self, data: bytes) -> float:
        return self._fmt.unpack(data)[0]


class BytesCodec:
    """Values that already are bytes."""

    name = "bytes"

    def encode(self, value: bytes) -> bytes:
        return bytes(value)

    def decode(self, data: bytes) -> bytes:
        return bytes(data)


class JsonCodec(Generic[V]):
    """JSON-compatible structs (dicts, lists, numbers, strings), compact and key-sorted so
    equal values give equal bytes."""

    name = "json"

    def encode(self, value: Any) -> bytes:
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")

    def decode(self, data: bytes) -> Any:
        return json.loads(data)


BUILTIN_CODECS: dict[str, type] = {c.name: c for c in (Int64Codec, Float64Codec, BytesCodec, JsonCodec)}


def codec_by_name(name: str) -> ValueCodec[Any]:
    """A built-in codec from its declared name (as written in a store's metadata)."""
    try:
        return BUILTIN_CODECS[name]()
    except KeyError:
        raise ValueError(f"unknown value codec {name!r}; known: {sorted(BUILTIN_CODECS)}") from None
