"""The elastic stage running a user's keyed operator (`elasticity.operators`) inside Spark.

Plan of one micro-batch, beside the counting stage's (`pipelines.elastic_stage`):

    good rows (user columns) ──xxhash64(key) in the JVM──► route by the layout (same CASE,
        same placement labels) ──repartition(N, label)──► task p = channel order[p]:
        ChannelRunner(operator, channel store of bytes).run(batch, rows, watermark, time)
        ──► output rows + rejected rows (one Arrow stream, told apart by `REASON_COLUMN`)

Probes travel with the rows (null user columns, `probe_sent_ms` set) so each channel's probe
latency is measured in the task that runs its rows, as in the counting stage.

The operator's state, timers and TTL are one batch transaction of the channel's store; a
replayed batch recomputes its outputs from the durable history (the runner's replay contract),
so the batch's watermark and processing time must be the recorded ones (`OperatorBatch`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Accumulator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from elasticity.layout import Layout
from elasticity.operators import ChannelRunner, KeyedOperator
from elasticity.operators.types import HASH_COLUMN, REJECT_REASON_COLUMN
from elasticity.state import StateStore
from pipelines.elastic_stage import (
    StageSpec,
    ordered_placement,
    probe_rows,
    route,
    state_bytes,
    task_order,
    warm_worker,
    worker_stores,
)
from pipelines.streams.executors import worker_executor_id
from pipelines.streams.metrics import ChannelMetrics, RebuildReport
from pipelines.streams.names import FIRST_STAGE

CHANNEL_COLUMN = "channel"
"""The channel that produced an output row (added to the operator's columns)."""
REASON_COLUMN = "_esp_reject_reason"
"""Set on rows the operator rejected (`Context.reject`), null on its outputs."""
REJECTED_COLUMN = "_esp_rejected_row"
"""A rejected row's columns as JSON (the operator's input columns, without the key hash)."""
PROBE_COLUMN = "probe_sent_ms"
ROUTING_COLUMNS = (CHANNEL_COLUMN, "label")
RESERVED_INPUT_COLUMNS = frozenset({HASH_COLUMN, PROBE_COLUMN, *ROUTING_COLUMNS})
"""Columns esp adds to a job's rows on their way to the operator: a parser must not produce them."""
RESERVED_OUTPUT_COLUMNS = frozenset({CHANNEL_COLUMN, "batch_id", REASON_COLUMN, REJECTED_COLUMN})
"""Columns esp adds to an operator's outputs: its output schema must not declare them."""


NO_WATERMARK_MS = -(2**63)
"""The watermark before any event time was seen: no event-time timer is due, nothing is late."""


@dataclass(frozen=True)
class OperatorBatch:
    """One micro-batch as the operator sees it; times are epoch ms, recorded so a replay reuses them."""

    batch_id: int
    watermark_ms: int
    processing_ms: int


def operator_input(good: DataFrame, raw: DataFrame, key_column: str, stage: str = FIRST_STAGE) -> DataFrame:
    """The input of elastic stage `stage`: the job's good rows with their key's hash, and the batch's
    valid probes of that stage (keyed by their routing key, other columns null)."""
    # One step per side: each DataFrame step is analysed on the driver again, in every batch.
    rows = good.selectExpr("*", f"xxhash64(`{key_column}`) AS {HASH_COLUMN}", f"CAST(NULL AS BIGINT) AS {PROBE_COLUMN}")
    return rows.unionByName(probe_rows(raw, stage, key_column), allowMissingColumns=True)


def stage_schema(operator: KeyedOperator[Any]) -> pa.Schema:
    """The Arrow schema of the stage's output: the operator's columns (nullable, since rejected rows
    leave them empty), the channel, and the rejection columns."""
    fields = [field.with_nullable(True) for field in operator.output_schema]
    return pa.schema(
        [
            *fields,
            pa.field(CHANNEL_COLUMN, pa.int32(), False),
            pa.field(REASON_COLUMN, pa.string()),
            pa.field(REJECTED_COLUMN, pa.string()),
        ]
    )


def run_operator_stage(
    rows: DataFrame,
    operator: KeyedOperator[Any],
    layout: Layout,
    labels: list[int],
    spec: StageSpec,
    batch: OperatorBatch,
    previous_channels: list[int],
    reports: Accumulator,
    weight_column: str | None = None,
) -> DataFrame:
    """The stage's output rows for one batch (outputs and rejected rows: `output_rows`, `rejected_rows`);
    computing them adds each task's `ChannelMetrics` to `reports`. `weight_column`: how many input
    records a row stands for (None: one)."""
    order = task_order(layout, previous_channels)
    routed = route(rows, layout, ordered_placement(layout, labels, order)).repartition(layout.n_channels, "label")
    timezone = routed.sparkSession.conf.get("spark.sql.session.timeZone")
    input_schema = to_arrow_schema(routed.schema, timezone=timezone)
    task = _operator_task(
        spec, operator, input_schema, layout.to_json(), order, previous_channels, batch, reports, weight_column
    )
    return routed.mapInArrow(task, from_arrow_schema(stage_schema(operator)))


def output_rows(output: DataFrame, operator: KeyedOperator[Any], batch_id: int | None = None) -> DataFrame:
    """The operator's output rows of the stage's `output`, with their channel (and `batch_id`, if given)."""
    tagged = [F.lit(batch_id).alias("batch_id")] if batch_id is not None else []
    return output.where(f"{REASON_COLUMN} IS NULL").select(*operator.output_schema.names, CHANNEL_COLUMN, *tagged)


def rejected_rows(output: DataFrame) -> DataFrame:
    """The rows the operator rejected among the stage's `output`: channel, reason, row JSON."""
    return output.where(f"{REASON_COLUMN} IS NOT NULL").selectExpr(
        CHANNEL_COLUMN, f"{REASON_COLUMN} AS reason", f"{REJECTED_COLUMN} AS row"
    )


_RUNNERS: dict[tuple[StageSpec, int], ChannelRunner[Any]] = {}


def _runner_for(spec: StageSpec, channel: int, store: StateStore, operator: KeyedOperator[Any]) -> ChannelRunner[Any]:
    """The worker's runner of `channel`, kept while its store is (the runner's timer index is a
    cache of the store's timers, valid as long as the same working set is)."""
    runner = _RUNNERS.get((spec, channel))
    if runner is None or runner.store is not store:
        fence = spec.fence.check if spec.fence is not None else None
        runner = _RUNNERS[(spec, channel)] = ChannelRunner(operator, store, fence)
    runner.operator = operator  # the same logic, unpickled again with each task
    return runner


def _as_small_types(table: pa.Table) -> pa.Table:
    """Spark 4 ships strings and binaries as large types; operators (and their tests) see the
    plain ones, whatever Spark's setting."""
    narrowed = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}
    schema = pa.schema([f.with_type(narrowed.get(f.type, f.type)) for f in table.schema])
    return table if schema.equals(table.schema) else table.cast(schema)


def _operator_task(
    spec: StageSpec,
    operator: KeyedOperator[Any],
    input_schema: pa.Schema,
    layout_json: str,
    order: list[int],
    previous_channels: list[int],
    batch: OperatorBatch,
    reports: Accumulator,
    weight_column: str | None,
):
    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        started = time.perf_counter()
        warmup_s = warm_worker()
        layout = Layout.from_json(layout_json)
        # The task's partition is the channel's place in `order` only in a task of the stage's own
        # shuffle: never compute a stage inside a narrow step of another (a coalesce) that runs
        # several of its partitions in one task (`pipelines.streams.runner` caches each stage first).
        channel = order[TaskContext.get().partitionId()]
        received = list(batches)
        # Even a channel without rows runs: its timers may be due.
        table = _as_small_types(pa.Table.from_batches(received) if received else input_schema.empty_table())
        strays = set(pc.unique(table[CHANNEL_COLUMN]).to_pylist()) - {channel}
        if strays:
            raise RuntimeError(f"placement broken: task of channel {channel} got rows of channels {sorted(strays)}")
        is_probe = pc.is_valid(table[PROBE_COLUMN])
        probes = table.filter(is_probe)[PROBE_COLUMN].to_pylist()
        rows = table.filter(pc.invert(is_probe)).drop_columns([*ROUTING_COLUMNS, PROBE_COLUMN])
        opening = time.perf_counter()
        store = worker_stores(spec).store_for(
            channel, layout.epoch, frozenset(previous_channels), frozenset(layout.channels)
        )
        open_ms = (time.perf_counter() - opening) * 1000
        rebuilt, store.last_restore = store.last_restore, None
        result = _runner_for(spec, channel, store, operator).run(
            batch.batch_id, rows, batch.watermark_ms, batch.processing_ms
        )
        load = channel_load(rows, operator.key_column, weight_column)
        if spec.service_ms_per_record > 0:
            # An I/O-bound stage (one external call per record): the task waits without using a
            # core, so on a small machine it is channels, not cores, that add capacity.
            time.sleep(load.records * spec.service_ms_per_record / 1000.0)
        finished_ms = time.time() * 1000
        report = ChannelMetrics(
            channel,
            load.records,
            load.keys,
            (time.perf_counter() - started) * 1000,
            len(store),
            state_bytes(store),
            [finished_ms - sent for sent in probes],
            top_key_records=load.top_key_records,
            open_ms=open_ms,
            apply_ms=result.apply_s * 1000 if result.apply_s is not None else None,
            rebuild=RebuildReport.of(rebuilt, warmup_s) if rebuilt is not None else None,
            warmup_ms=warmup_s * 1000 if warmup_s is not None else None,
            rejected_records=result.rejected.num_rows,
            executor=worker_executor_id(),
            output_rows=result.output.num_rows,
        )
        reports.add({(batch.batch_id, channel): report})
        schema = stage_schema(operator)
        yield from _output_batches(result.output, schema, channel)
        yield from _rejected_batches(result.rejected, schema, channel)

    return apply


@dataclass(frozen=True)
class ChannelLoad:
    """What a channel's rows of a batch weigh: input records, distinct keys, the busiest key's records."""

    records: int
    keys: int
    top_key_records: int


def channel_load(rows: pa.Table, key_column: str, weight_column: str | None) -> ChannelLoad:
    """The load of a channel's rows; with `weight_column`, each row stands for that many records."""
    if rows.num_rows == 0:
        return ChannelLoad(0, 0, 0)
    if weight_column is None:
        per_key = pc.value_counts(rows[key_column]).field("counts")
    else:
        weights = rows.select([key_column, weight_column]).group_by(key_column).aggregate([(weight_column, "sum")])
        per_key = weights[f"{weight_column}_sum"]
    return ChannelLoad(int(pc.sum(per_key).as_py() or 0), len(per_key), int(pc.max(per_key).as_py() or 0))


def _output_batches(output: pa.Table, schema: pa.Schema, channel: int) -> Iterator[pa.RecordBatch]:
    if not output.num_rows:
        return
    n = output.num_rows
    columns = [output[name] for name in output.schema.names] + [
        pa.array([channel] * n, pa.int32()),
        pa.nulls(n, pa.string()),
        pa.nulls(n, pa.string()),
    ]
    yield from pa.Table.from_arrays(columns, schema=schema).combine_chunks().to_batches()


def _rejected_batches(rejected: pa.Table, schema: pa.Schema, channel: int) -> Iterator[pa.RecordBatch]:
    if not rejected.num_rows:
        return
    n = rejected.num_rows
    reasons = rejected[REJECT_REASON_COLUMN]
    kept = [name for name in rejected.column_names if name not in (REJECT_REASON_COLUMN, HASH_COLUMN)]
    rows = [json.dumps(row, default=str, sort_keys=True) for row in rejected.select(kept).to_pylist()]
    esp_columns = (CHANNEL_COLUMN, REASON_COLUMN, REJECTED_COLUMN)
    columns = [pa.nulls(n, field.type) for field in schema if field.name not in esp_columns] + [
        pa.array([channel] * n, pa.int32()),
        reasons.cast(pa.string()),
        pa.array(rows, pa.string()),
    ]
    yield from pa.Table.from_arrays(columns, schema=schema).combine_chunks().to_batches()
