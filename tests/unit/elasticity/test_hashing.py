"""The numpy XXH64 port equals the xxhash library on Spark's int/long encodings, and the
signed reading matches Spark's LongType (Spark itself is checked in tests/integration)."""

from __future__ import annotations

import numpy as np
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from elasticity.hashing import (
    KEY_HASH_SEED,
    hash_bytes,
    hash_int32,
    hash_int32_array,
    hash_int64,
    hash_int64_array,
    hash_str,
    hash_strings,
    to_signed64,
)


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50))
def test_int64_array_matches_the_library_on_eight_little_endian_bytes(values) -> None:
    expected = [hash_int64(v) for v in values]
    assert list(hash_int64_array(np.array(values, dtype=np.int64))) == expected
    assert expected == [
        to_signed64(xxhash.xxh64_intdigest(v.to_bytes(8, "little", signed=True), seed=KEY_HASH_SEED)) for v in values
    ]


@given(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=50))
def test_int32_array_matches_the_library_on_four_little_endian_bytes(values) -> None:
    expected = [
        to_signed64(xxhash.xxh64_intdigest(v.to_bytes(4, "little", signed=True), seed=KEY_HASH_SEED)) for v in values
    ]
    assert list(hash_int32_array(np.array(values, dtype=np.int32))) == expected
    assert [hash_int32(v) for v in values] == expected


@given(st.lists(st.text(), max_size=30))
def test_strings_hash_their_utf8_bytes_as_signed_longs(values) -> None:
    hashes = [hash_str(v) for v in values]
    assert hashes == [hash_bytes(v.encode("utf-8")) for v in values]
    assert list(hash_strings(values)) == hashes
    assert all(-(2**63) <= h < 2**63 for h in hashes)


def test_signed_reading_wraps_the_upper_half() -> None:
    assert to_signed64(0) == 0
    assert to_signed64(2**63 - 1) == 2**63 - 1
    assert to_signed64(2**63) == -(2**63)
    assert to_signed64(2**64 - 1) == -1
