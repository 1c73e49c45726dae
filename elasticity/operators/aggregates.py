"""Built-in aggregates (count, sum, min, max, mean, approximate distinct, top-k) and the
operator that keeps one per key (`KeyedAggregate`).

An `Aggregate` folds a key's values into an accumulator: `add` takes all of one key's values
of a batch at once (vectorized), `merge` joins two accumulators (session windows need it),
`result` is what is emitted. Its `codec` stores the accumulator as a key's state; `to_json` /
`from_json` let windows keep many accumulators in one JSON state value.
"""

from __future__ import annotations

import base64
import heapq
from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

import datasketches
import pyarrow as pa
import pyarrow.compute as pc

from elasticity.operators.api import HASH_COLUMN, Context, KeyedOperator
from elasticity.operators.groups import group_rows
from elasticity.operators.view import StateView
from elasticity.state.codecs import ArrowStructCodec, BytesCodec, Float64Codec, Int64Codec, JsonCodec, ValueCodec

A = TypeVar("A")


class Aggregate(ABC, Generic[A]):
    """How values of one key fold into an accumulator `A` and what it yields."""

    name: str
    codec: ValueCodec[A]
    result_type: pa.DataType
    arrow_function: str | None = None
    """A pyarrow hash aggregate ("sum", "min", ...) whose value per key is this batch's accumulator
    of the key, to `merge` into its state: set, `KeyedAggregate` folds a batch in one vectorized
    pass instead of one `add` per key (None: per key)."""

    @abstractmethod
    def zero(self) -> A: ...

    @abstractmethod
    def add(self, acc: A, values: pa.Array) -> A:
        """Fold one key's values of a batch, in arrival order."""

    @abstractmethod
    def merge(self, left: A, right: A) -> A: ...

    def result(self, acc: A) -> Any:
        return acc

    def to_json(self, acc: A) -> Any:
        return acc

    def from_json(self, raw: Any) -> A:
        return raw


class Count(Aggregate[int]):
    name, codec, result_type = "count", Int64Codec(), pa.int64()
    arrow_function = "count_all"

    def zero(self) -> int:
        return 0

    def add(self, acc: int, values: pa.Array) -> int:
        return acc + len(values)

    def merge(self, left: int, right: int) -> int:
        return left + right


class IntSum(Aggregate[int]):
    """The exact integer total of a column, e.g. counts pre-aggregated per key in the JVM."""

    name, codec, result_type = "int_sum", Int64Codec(), pa.int64()
    arrow_function = "sum"

    def zero(self) -> int:
        return 0

    def add(self, acc: int, values: pa.Array) -> int:
        return acc + int(pc.sum(values).as_py() or 0)

    def merge(self, left: int, right: int) -> int:
        return left + right


class Sum(Aggregate[float]):
    name, codec, result_type = "sum", Float64Codec(), pa.float64()
    arrow_function = "sum"

    def zero(self) -> float:
        return 0.0

    def add(self, acc: float, values: pa.Array) -> float:
        return acc + float(pc.sum(values).as_py() or 0.0)

    def merge(self, left: float, right: float) -> float:
        return left + right


class Min(Aggregate[float]):
    name, codec, result_type = "min", Float64Codec(), pa.float64()
    arrow_function = "min"

    def zero(self) -> float:
        return float("inf")

    def add(self, acc: float, values: pa.Array) -> float:
        return min(acc, float(pc.min(values).as_py()))

    def merge(self, left: float, right: float) -> float:
        return min(left, right)


class Max(Aggregate[float]):
    name, codec, result_type = "max", Float64Codec(), pa.float64()
    arrow_function = "max"

    def zero(self) -> float:
        return float("-inf")

    def add(self, acc: float, values: pa.Array) -> float:
        return max(acc, float(pc.max(values).as_py()))

    def merge(self, left: float, right: float) -> float:
        return max(left, right)


MEAN_SCHEMA = pa.schema([pa.field("sum", pa.float64()), pa.field("count", pa.int64())])


class Mean(Aggregate[dict[str, Any]]):
    """Sum and count as a versioned Arrow struct (the struct codec's first user)."""

    name, codec, result_type = "mean", ArrowStructCodec({1: MEAN_SCHEMA}), pa.float64()

    def zero(self) -> dict[str, Any]:
        return {"sum": 0.0, "count": 0}

    def add(self, acc: dict[str, Any], values: pa.Array) -> dict[str, Any]:
        return {"sum": acc["sum"] + float(pc.sum(values).as_py() or 0.0), "count": acc["count"] + len(values)}

    def merge(self, left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
        return {"sum": left["sum"] + right["sum"], "count": left["count"] + right["count"]}

    def result(self, acc: dict[str, Any]) -> float | None:
        return acc["sum"] / acc["count"] if acc["count"] else None


class ApproxDistinct(Aggregate[bytes]):
    """HyperLogLog (Apache DataSketches) over the values' string forms; state is the compact sketch."""

    name, codec, result_type = "approx_distinct", BytesCodec(), pa.int64()

    def __init__(self, lg_k: int = 12) -> None:
        self.lg_k = lg_k

    def zero(self) -> bytes:
        return bytes(datasketches.hll_sketch(self.lg_k).serialize_compact())

    def add(self, acc: bytes, values: pa.Array) -> bytes:
        sketch = datasketches.hll_sketch.deserialize(acc)
        for value in values.cast(pa.string()).to_pylist():
            sketch.update(value)
        return bytes(sketch.serialize_compact())

    def merge(self, left: bytes, right: bytes) -> bytes:
        union = datasketches.hll_union(self.lg_k)
        union.update(datasketches.hll_sketch.deserialize(left))
        union.update(datasketches.hll_sketch.deserialize(right))
        return bytes(union.get_result().serialize_compact())

    def result(self, acc: bytes) -> int:
        return round(datasketches.hll_sketch.deserialize(acc).get_estimate())

    def to_json(self, acc: bytes) -> str:
        return base64.b64encode(acc).decode()

    def from_json(self, raw: Any) -> bytes:
        return base64.b64decode(raw)


class TopK(Aggregate[list[float]]):
    """The k largest values of a key, largest first."""

    name, result_type = "top_k", pa.list_(pa.float64())
    codec: JsonCodec[list[float]] = JsonCodec()

    def __init__(self, k: int = 3) -> None:
        self.k = k

    def zero(self) -> list[float]:
        return []

    def add(self, acc: list[float], values: pa.Array) -> list[float]:
        return heapq.nlargest(self.k, [*acc, *(float(v) for v in values.to_pylist())])

    def merge(self, left: list[float], right: list[float]) -> list[float]:
        return heapq.nlargest(self.k, [*left, *right])


def _batch_partials(
    rows: pa.Table, key_column: str, value_column: str, function: str
) -> tuple[list[str], list[int], list[Any]]:
    """(keys, hashes, partial accumulators) per distinct key, first appearance first: one pyarrow group-by."""
    table = rows.select([key_column, HASH_COLUMN, value_column])
    target = ([], function) if function == "count_all" else (value_column, function)
    grouped = table.group_by(key_column, use_threads=False).aggregate([(HASH_COLUMN, "min"), target])
    partial_name = function if function == "count_all" else f"{value_column}_{function}"
    return (
        grouped[key_column].to_pylist(),
        grouped[f"{HASH_COLUMN}_min"].to_pylist(),
        grouped[partial_name].to_pylist(),
    )


def aggregate_schema(result_type: pa.DataType, key_column: str = "key") -> pa.Schema:
    return pa.schema([pa.field(key_column, pa.string()), pa.field("value", result_type)])


class KeyedAggregate(KeyedOperator[Any]):
    """One running aggregate per key; each batch emits (key, result) for every key it touched."""

    def __init__(
        self, aggregate: Aggregate[Any], value_column: str = "value", key_column: str = "key", ttl_ms: int | None = None
    ) -> None:
        self.aggregate = aggregate
        self.value_column = value_column
        self.key_column = key_column
        self.ttl_ms = ttl_ms
        self.state_codec = aggregate.codec
        self.output_schema = aggregate_schema(aggregate.result_type, key_column)
        self.uses_timers = ttl_ms is not None

    def update(self, rows: pa.Table, state: StateView[Any], ctx: Context) -> pa.Table:
        if self.aggregate.arrow_function is not None:
            return self._update_vectorized(rows, state, self.aggregate.arrow_function)
        groups = group_rows(rows, self.key_column)
        values = rows[self.value_column].combine_chunks()
        agg = self.aggregate
        current = state.get_many(groups.keys, groups.hashes)
        updated = [
            agg.add(agg.zero() if acc is None else acc, values.take(pa.array(idx)))
            for acc, idx in zip(current, groups.rows)
        ]
        state.put_many(groups.keys, groups.hashes, updated)
        return self._output(groups.keys, updated)

    def _update_vectorized(self, rows: pa.Table, state: StateView[Any], function: str) -> pa.Table:
        """The batch's accumulator per key in one group-by, merged into each key's state."""
        agg = self.aggregate
        if rows.num_rows == 0:
            return self.output_schema.empty_table()
        keys, hashes, partials = _batch_partials(rows, self.key_column, self.value_column, function)
        current = state.get_many(keys, hashes)
        updated = [agg.merge(agg.zero() if acc is None else acc, partial) for acc, partial in zip(current, partials)]
        state.put_many(keys, hashes, updated)
        return self._output(keys, updated)

    def _output(self, keys: list[str], accumulators: list[Any]) -> pa.Table:
        agg = self.aggregate
        return pa.table(
            [pa.array(keys, pa.string()), pa.array([agg.result(a) for a in accumulators], agg.result_type)],
            schema=self.output_schema,
        )
