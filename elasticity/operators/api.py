"""The keyed stateful operator API: what a user implements to run logic on an elastic stage.

An operator is *vectorized per channel*: once per micro-batch, each channel calls
`update(rows, state, ctx)` with every row routed to it (an Arrow table holding the key column
and the `key_hash` column), a `StateView` over the channel's batch transaction, and a
`Context` (batch id, watermark, processing time). It returns its output rows as an Arrow table
of `output_schema`. Timers registered through the view fire later in `on_timer(fired, state,
ctx)`, also vectorized (one row per fired timer). Both functions must be deterministic in
(rows, state, ctx): a replayed batch's outputs are recomputed from the channel's durable
history (see `elasticity.operators.runner`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, TypeVar

import pyarrow as pa

from elasticity.operators.types import FIRED_SCHEMA, HASH_COLUMN, REJECT_REASON_COLUMN, Context, TimeDomain
from elasticity.operators.view import StateView
from elasticity.state.codecs import ValueCodec

S = TypeVar("S")

__all__ = [
    "FIRED_SCHEMA",
    "HASH_COLUMN",
    "REJECT_REASON_COLUMN",
    "Context",
    "KeyedOperator",
    "TimeDomain",
    "require_schema",
]


class KeyedOperator(ABC, Generic[S]):
    """A keyed stateful operator. Subclasses set the class attributes and implement `update`.

    - `state_codec`: how one key's state value becomes bytes (any `ValueCodec`);
    - `output_schema`: the schema of every table `update` / `on_timer` return;
    - `key_column`: the string column keys are read from;
    - `ttl_ms`: state not written for this long (processing time) is never returned and is
      deleted by a cleanup timer; None keeps state forever;
    - `uses_timers`: False for an operator without timers or TTL (it skips the timer index).
    """

    state_codec: ValueCodec[S]
    output_schema: pa.Schema
    key_column: str = "key"
    ttl_ms: int | None = None
    uses_timers: bool = True
    """False promises the operator registers no timer and has no TTL: the runner then keeps no
    index of the channel's timers (which a rescale would make it rebuild by a scan of the channel)."""

    @abstractmethod
    def update(self, rows: pa.Table, state: StateView[S], ctx: Context) -> pa.Table:
        """Process the channel's rows of one batch; return the output rows."""

    def on_timer(self, fired: pa.Table, state: StateView[S], ctx: Context) -> pa.Table:
        """Handle fired timers (`FIRED_SCHEMA` rows); return the output rows. None by default."""
        return self.output_schema.empty_table()

    def empty_output(self) -> pa.Table:
        return self.output_schema.empty_table()


def require_schema(table: pa.Table, schema: pa.Schema, where: str) -> pa.Table:
    """The operator's output cast to its declared schema, or a clear error saying which function broke it."""
    if table.schema.equals(schema):
        return table
    try:
        return table.select(schema.names).cast(schema)
    except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise TypeError(f"{where} returned {table.schema}, not the declared output schema {schema}: {error}") from None
