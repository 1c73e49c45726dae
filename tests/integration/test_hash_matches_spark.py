"""Spark's `xxhash64(col)` equals esp's Python key hash, for every encoding esp supports.

If this fails, routing in the JVM and routing in Python disagree and keys land on the wrong
channel. Covers StringType (ASCII, empty, non-ASCII, long), BinaryType, IntegerType (4 LE
bytes), LongType (8 LE bytes) including extremes, and NULL (the seed).
"""

from __future__ import annotations

import numpy as np
import pytest

from elasticity.hashing import (
    hash_bytes,
    hash_int32,
    hash_int32_array,
    hash_int64,
    hash_int64_array,
    hash_null,
    hash_str,
    hash_strings,
)

pytestmark = pytest.mark.integration

STRINGS = [
    "",
    "a",
    "hello",
    "the quick brown fox jumps over the lazy dog " * 5,  # > 32 bytes: XXH64's striped path
    "straße",
    "日本語のキー",
    "emoji 🚀 key",
    "naïve café",
    "\u0000nul inside",
]
INTS = [0, 1, -1, 42, 2**31 - 1, -(2**31), 123456789]
LONGS = [0, 1, -1, 42, 2**63 - 1, -(2**63), 2**31, -(2**40) + 7, 9876543210123]


def test_strings_hash_like_spark(spark) -> None:
    df = spark.createDataFrame([(s,) for s in STRINGS], "k string")
    rows = df.selectExpr("k", "xxhash64(k) AS h").collect()
    assert len(rows) == len(STRINGS)
    for row in rows:
        assert row["h"] == hash_str(row["k"]), row["k"]
    assert list(hash_strings(STRINGS)) == [r["h"] for r in rows]


def test_binary_hashes_like_spark(spark) -> None:
    values = [b"", b"\x00\xff", "日本".encode(), bytes(range(40))]
    df = spark.createDataFrame([(bytearray(v),) for v in values], "k binary")
    for row in df.selectExpr("k", "xxhash64(k) AS h").collect():
        assert row["h"] == hash_bytes(bytes(row["k"]))


def test_ints_hash_as_four_little_endian_bytes(spark) -> None:
    df = spark.createDataFrame([(v,) for v in INTS], "k int")
    rows = df.selectExpr("k", "xxhash64(k) AS h").collect()
    for row in rows:
        assert row["h"] == hash_int32(row["k"]), row["k"]
    by_key = {r["k"]: r["h"] for r in rows}
    assert list(hash_int32_array(np.array(INTS, dtype=np.int32))) == [by_key[v] for v in INTS]


def test_longs_hash_as_eight_little_endian_bytes(spark) -> None:
    df = spark.createDataFrame([(v,) for v in LONGS], "k long")
    rows = df.selectExpr("k", "xxhash64(k) AS h").collect()
    for row in rows:
        assert row["h"] == hash_int64(row["k"]), row["k"]
    by_key = {r["k"]: r["h"] for r in rows}
    assert list(hash_int64_array(np.array(LONGS, dtype=np.int64))) == [by_key[v] for v in LONGS]


def test_int_and_long_of_same_number_hash_differently(spark) -> None:
    # Why the encodings must be declared: Spark hashes the column's type, not the number.
    row = spark.sql("SELECT xxhash64(CAST(7 AS INT)) AS i, xxhash64(CAST(7 AS BIGINT)) AS l").first()
    assert row["i"] == hash_int32(7)
    assert row["l"] == hash_int64(7)
    assert row["i"] != row["l"]


def test_null_hashes_to_the_seed(spark) -> None:
    row = spark.sql("SELECT xxhash64(CAST(NULL AS STRING)) AS h").first()
    assert row["h"] == hash_null()
