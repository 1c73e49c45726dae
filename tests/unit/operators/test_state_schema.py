"""State schema evolution with `ArrowStructCodec`: values written under v1 read under v2 after a
compatible change (added field with a default or nullable, widened int), through a real
operator whose channel state survives a restart; incompatible changes fail naming the field."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticity.operators import Batch, Context, Harness, KeyedOperator, StateView, group_rows
from elasticity.state import ArrowStructCodec, SchemaEvolutionError, codec_by_name, struct_field

V1 = pa.schema([pa.field("clicks", pa.int32()), pa.field("last_page", pa.string())])
V2 = pa.schema(
    [
        pa.field("clicks", pa.int64()),  # widened
        pa.field("last_page", pa.string()),
        struct_field("weight", pa.float64(), default=1.0),  # added, with a default
        pa.field("referrer", pa.string()),  # added, nullable
    ]
)


class Profile(KeyedOperator[dict[str, Any]]):
    """Per-user clicks and last page; v2 also reports the weight field added later."""

    output_schema = pa.schema([("key", pa.string()), ("clicks", pa.int64()), ("weight", pa.float64())])

    def __init__(self, codec: ArrowStructCodec) -> None:
        self.state_codec = codec

    def update(self, rows: pa.Table, state: StateView[dict[str, Any]], ctx: Context) -> pa.Table:
        groups = group_rows(rows, "key")
        pages = rows["page"].to_pylist()
        new = []
        for before, idx in zip(state.get_many(groups.keys, groups.hashes), groups.rows):
            value = dict(before or {"clicks": 0, "weight": 1.0})
            value.update(clicks=value["clicks"] + len(idx), last_page=pages[idx[-1]])
            new.append(value)
        state.put_many(groups.keys, groups.hashes, new)
        return pa.table(
            {
                "key": groups.keys,
                "clicks": pa.array([v["clicks"] for v in new], pa.int64()),
                "weight": pa.array([v.get("weight") for v in new], pa.float64()),
            }
        )


def clicks(keys: list[str]) -> Batch:
    return Batch(pa.table({"key": keys, "page": [f"/p/{k}" for k in keys]}))


def test_state_written_under_v1_reads_under_v2_after_a_restart(tmp_path) -> None:
    v1 = Harness(Profile(ArrowStructCodec({1: V1})), tmp_path, channels=3)
    v1.run(clicks(["u1", "u2", "u1"]))
    v1.rescale("split", 0)
    v1.close()
    # A new deployment: same durable state, the operator now declares schema v2.
    v2 = Harness(Profile(ArrowStructCodec({1: V1, 2: V2})), tmp_path, channels=3)
    rows = {r["key"]: r for r in v2.run(clicks(["u1", "u2", "u3"])).output.to_pylist()}
    assert rows["u1"] == {"key": "u1", "clicks": 3, "weight": 1.0}  # old value, default filled
    assert rows["u2"]["clicks"] == 2 and rows["u3"]["clicks"] == 1
    v2.close()


@settings(max_examples=50, deadline=None)
@given(clicks=st.integers(-(2**31), 2**31 - 1), page=st.text(max_size=20) | st.none())
def test_v1_values_decode_under_v2(clicks: int, page: str | None) -> None:
    old = ArrowStructCodec({1: V1}).encode({"clicks": clicks, "last_page": page})
    assert ArrowStructCodec({1: V1, 2: V2}).decode(old) == {
        "clicks": clicks,
        "last_page": page,
        "weight": 1.0,
        "referrer": None,
    }


def test_widened_int_to_float_reads_as_float() -> None:
    v1 = pa.schema([pa.field("n", pa.int32())])
    v2 = pa.schema([pa.field("n", pa.float64())])
    value = ArrowStructCodec({1: v1, 2: v2}).decode(ArrowStructCodec({1: v1}).encode({"n": 7}))
    assert value == {"n": 7.0} and isinstance(value["n"], float)


@pytest.mark.parametrize(
    ("new_field", "problem"),
    [
        (pa.field("clicks", pa.int16()), "not a widening"),
        (pa.field("clicks", pa.string()), "not a widening"),
        (pa.field("score", pa.float64(), nullable=False), "non-nullable without a default"),
    ],
)
def test_incompatible_change_names_the_field(new_field: pa.Field, problem: str) -> None:
    fields = [f for f in V1 if f.name != new_field.name] + [new_field]
    with pytest.raises(SchemaEvolutionError, match=problem) as error:
        ArrowStructCodec({1: V1, 2: pa.schema(fields)})
    assert error.value.field == new_field.name


def test_unknown_version_is_an_error_not_garbage() -> None:
    newer = ArrowStructCodec({1: V1, 2: V2}).encode({"clicks": 1, "last_page": "/", "weight": 2.0})
    with pytest.raises(SchemaEvolutionError, match="unknown schema version 2"):
        ArrowStructCodec({1: V1}).decode(newer)


@pytest.mark.parametrize(
    ("name", "value"), [("int64", -5), ("float64", 2.5), ("bytes", b"\x00x"), ("json", {"a": [1]})]
)
def test_existing_codecs_still_round_trip(name: str, value: Any) -> None:
    codec = codec_by_name(name)
    assert codec.decode(codec.encode(value)) == value
