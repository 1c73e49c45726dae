"""The one key hash of esp, identical in Python and in Spark's JVM.

Every key is hashed with xxHash64, seed 42, and the 64-bit digest is read as a *signed* int64:
exactly what Spark SQL's `xxhash64(col)` returns, so a key can be routed in the JVM or in
Python and land on the same channel. Supported encodings (each proven against Spark by
`tests/integration/test_hash_matches_spark.py`):

- `StringType` -> the UTF-8 bytes of the string (empty string included);
- `BinaryType` -> the bytes as they are;
- `IntegerType` (and Byte/Short, which Spark widens to int) -> 4 little-endian bytes;
- `LongType` -> 8 little-endian bytes;
- `NULL` -> the seed itself (42), because Spark skips null inputs.

Scalar helpers use the `xxhash` C library; the int32/int64 array helpers are a vectorized
numpy port of XXH64 for 4- and 8-byte inputs (used to generate and route millions of keys
without a Python loop).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import xxhash

KEY_HASH_SEED = 42
"""Spark's fixed seed for `xxhash64`."""

_U64 = np.uint64
_PRIME1 = _U64(0x9E3779B185EBCA87)
_PRIME2 = _U64(0xC2B2AE3D27D4EB4F)
_PRIME3 = _U64(0x165667B19E3779F9)
_PRIME4 = _U64(0x85EBCA77C2B2AE63)
_PRIME5 = _U64(0x27D4EB2F165667C5)


def to_signed64(digest: int) -> int:
    """Read an unsigned 64-bit digest as the signed long Spark returns."""
    return digest - (1 << 64) if digest >= (1 << 63) else digest


def hash_bytes(data: bytes) -> int:
    """Spark `xxhash64` of a BinaryType value."""
    return to_signed64(xxhash.xxh64_intdigest(data, seed=KEY_HASH_SEED))


def hash_str(key: str) -> int:
    """Spark `xxhash64` of a StringType value (its UTF-8 bytes)."""
    return to_signed64(xxhash.xxh64_intdigest(key.encode("utf-8"), seed=KEY_HASH_SEED))


def hash_int32(value: int) -> int:
    """Spark `xxhash64` of an IntegerType value (4 little-endian bytes)."""
    return to_signed64(xxhash.xxh64_intdigest(int(value).to_bytes(4, "little", signed=True), seed=KEY_HASH_SEED))


def hash_int64(value: int) -> int:
    """Spark `xxhash64` of a LongType value (8 little-endian bytes)."""
    return to_signed64(xxhash.xxh64_intdigest(int(value).to_bytes(8, "little", signed=True), seed=KEY_HASH_SEED))


def hash_null() -> int:
    """Spark `xxhash64(NULL)`: a null input leaves the running hash at the seed."""
    return KEY_HASH_SEED


def hash_strings(keys: Sequence[str] | Iterable[str], count: int = -1) -> np.ndarray:
    """Hashes of many strings as an int64 array (a C call per key; no vectorized xxhash exists)."""
    digests = np.fromiter(
        (xxhash.xxh64_intdigest(k.encode("utf-8"), seed=KEY_HASH_SEED) for k in keys),
        dtype=np.uint64,
        count=count,
    )
    return digests.view(np.int64)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U64(r)) | (x >> _U64(64 - r))


def _avalanche(h: np.ndarray) -> np.ndarray:
    h ^= h >> _U64(33)
    h *= _PRIME2
    h ^= h >> _U64(29)
    h *= _PRIME3
    h ^= h >> _U64(32)
    return h


def hash_int64_array(values: np.ndarray) -> np.ndarray:
    """Vectorized Spark `xxhash64` of a LongType column: XXH64 of each value's 8 LE bytes."""
    lanes = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        k1 = _rotl(lanes * _PRIME2, 31) * _PRIME1
        h = np.full(lanes.shape, _U64(KEY_HASH_SEED) + _PRIME5 + _U64(8), dtype=np.uint64)
        h ^= k1
        h = _rotl(h, 27) * _PRIME1 + _PRIME4
        return _avalanche(h).view(np.int64)


def hash_int32_array(values: np.ndarray) -> np.ndarray:
    """Vectorized Spark `xxhash64` of an IntegerType column: XXH64 of each value's 4 LE bytes."""
    lanes = np.ascontiguousarray(values, dtype=np.int32).view(np.uint32).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = np.full(lanes.shape, _U64(KEY_HASH_SEED) + _PRIME5 + _U64(4), dtype=np.uint64)
        h ^= lanes * _PRIME1
        h = _rotl(h, 23) * _PRIME2 + _PRIME3
        return _avalanche(h).view(np.int64)
