"""Value codecs: how a channel's user-defined state values become bytes and back.

Stores keep values as bytes (so changelogs, snapshots and migration files are type-agnostic
Arrow `binary` columns); each store is opened with the `ValueCodec` of its operator. esp ships
codecs for int64 counts, float64 sums, raw bytes and JSON structs (windowed aggregates, small
records) and versioned Arrow structs (`ArrowStructCodec`: a value written under an older
schema version still reads after a compatible change); any object with `name`, `encode` and
`decode` works.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import pyarrow as pa

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


class SchemaEvolutionError(ValueError):
    """A struct schema change that stored values cannot follow; names the offending field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"state field {field!r}: {problem}")
        self.field = field


DEFAULT_METADATA = b"esp.default"
"""Field metadata key holding the JSON default of a field added after values were stored."""


def struct_field(name: str, type_: pa.DataType, default: Any = None, nullable: bool = True) -> pa.Field:
    """A schema field with an optional default, used when reading values written before it existed."""
    metadata = {DEFAULT_METADATA: json.dumps(default).encode()} if default is not None else None
    return pa.field(name, type_, nullable=nullable, metadata=metadata)


def _default_of(field: pa.Field) -> Any:
    raw = (field.metadata or {}).get(DEFAULT_METADATA)
    return None if raw is None else json.loads(raw)


def _widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every `old` value is exactly representable as `new` (the casts esp allows)."""
    if old == new:
        return True
    signed = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
    unsigned = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
    for family in (signed, unsigned, [pa.float16(), pa.float32(), pa.float64()]):
        if old in family and new in family:
            return family.index(new) >= family.index(old)
    if old in unsigned[:3] and new in signed:
        return signed.index(new) > unsigned.index(old)
    if old in (*signed[:3], *unsigned[:3]) and new == pa.float64():
        return True  # up to 32-bit integers fit a double's 53-bit mantissa
    return (old, new) in {(pa.string(), pa.large_string()), (pa.binary(), pa.large_binary())}


def check_evolution(old: pa.Schema, new: pa.Schema) -> None:
    """Raise `SchemaEvolutionError` unless values stored under `old` can be read as `new`:
    kept fields may only widen; added fields must be nullable or carry a default."""
    for field in new:
        index = old.get_field_index(field.name)
        if index < 0:
            if not field.nullable and _default_of(field) is None:
                raise SchemaEvolutionError(field.name, "added as non-nullable without a default")
            continue
        before = old.field(index).type
        if not _widens(before, field.type):
            raise SchemaEvolutionError(field.name, f"type changed {before} -> {field.type}, not a widening")


class ArrowStructCodec:
    """One Arrow struct (a Python dict) per value, tagged with the schema version it was written under.

    Bytes: 2-byte little-endian version, then the value as a one-row Arrow IPC record batch
    without its schema (the codec knows every version's schema). `versions` maps every schema
    version ever used to its schema; values are written under the highest. Reading an older
    value drops removed fields, widens kept ones and fills added ones with their default (or
    null). The whole lineage is checked when the codec is built, so an incompatible change
    fails at declaration time, naming the field, not on the first old value read.
    """

    name = "arrow-struct"
    _tag = struct.Struct("<H")

    def __init__(self, versions: Mapping[int, pa.Schema]) -> None:
        if not versions:
            raise ValueError("an ArrowStructCodec needs at least one schema version")
        self.versions = dict(sorted(versions.items()))
        self.version = max(self.versions)
        self.schema = self.versions[self.version]
        for old in self.versions.values():
            check_evolution(old, self.schema)

    def encode(self, value: Mapping[str, Any]) -> bytes:
        batch = pa.RecordBatch.from_pylist([dict(value)], schema=self.schema)
        return self._tag.pack(self.version) + batch.serialize().to_pybytes()

    def decode(self, data: bytes) -> dict[str, Any]:
        (version,) = self._tag.unpack_from(data)
        schema = self.versions.get(version)
        if schema is None:
            raise SchemaEvolutionError("<version>", f"value written under unknown schema version {version}")
        batch = pa.ipc.read_record_batch(pa.py_buffer(memoryview(data)[self._tag.size :]), schema)
        if version == self.version:
            row: dict[str, Any] = batch.to_pylist()[0]
            return row
        # Cast through Arrow so a widened int read as float64 comes back a float, as new values do.
        return {
            f.name: batch.column(f.name).cast(f.type)[0].as_py() if f.name in batch.schema.names else _default_of(f)
            for f in self.schema
        }


BUILTIN_CODECS: dict[str, type] = {c.name: c for c in (Int64Codec, Float64Codec, BytesCodec, JsonCodec)}


def codec_by_name(name: str) -> ValueCodec[Any]:
    """A built-in codec from its declared name (as written in a store's metadata); struct
    codecs need their schemas, so they are built by their operator, not by name."""
    try:
        return BUILTIN_CODECS[name]()
    except KeyError:
        raise ValueError(f"unknown value codec {name!r}; known: {sorted(BUILTIN_CODECS)}") from None
