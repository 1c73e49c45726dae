"""esp's public API for writing an elastic job: everything a job module imports comes from here.

A job is input records → `parse` (typed columns and a `reject_reason`; rejected records go to
the stream's dead-letter topic with their reason) → a keyed elastic stage running a
`KeyedOperator` (state, timers and TTL rescaled online, exactly once) → optionally further keyed
stages (`Stage`), each taking the previous one's output rows re-keyed, in the same micro-batch
→ the stream's results table and results topic. A stream runs it when its `job` setting names the factory
(`"my_package.my_module:my_job"`, a function without arguments returning a `Job`).

    from pipelines import api

    def my_job() -> api.Job:
        return api.Job(parse=parse_clicks, operator=Sessionize(gap_ms=30_000),
                       result_key_columns=("user_id", "session_start_ms"), event_time_column="event_time")

See docs/operators.md for the operator API (`update`, `on_timer`, `StateView`, the replay contract).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame

from elasticity.operators import (
    FIRED_SCHEMA,
    HASH_COLUMN,
    ApproxDistinct,
    Context,
    Count,
    IntSum,
    KeyedAggregate,
    KeyedOperator,
    Max,
    Mean,
    Min,
    Session,
    Sliding,
    StateView,
    Sum,
    TimeDomain,
    TopK,
    Tumbling,
    WindowedAggregate,
)
from elasticity.state.codecs import ArrowStructCodec, BytesCodec, Float64Codec, Int64Codec, JsonCodec
from pipelines.column_cache import once_per_jvm
from pipelines.dead_letters import REJECT
from pipelines.operator_stage import NO_WATERMARK_MS, RESERVED_INPUT_COLUMNS, RESERVED_OUTPUT_COLUMNS
from pipelines.operator_stage import OperatorBatch as BatchTimes
from pipelines.streams.names import FIRST_STAGE
from pipelines.streams.spec import JOB_REFERENCE

__all__ = [
    "FIRST_STAGE",
    "FIRED_SCHEMA",
    "HASH_COLUMN",
    "KAFKA_COLUMNS",
    "NO_WATERMARK_MS",
    "REJECT",
    "ApproxDistinct",
    "ArrowStructCodec",
    "BatchTimes",
    "BytesCodec",
    "Context",
    "Count",
    "Float64Codec",
    "Int64Codec",
    "IntSum",
    "Job",
    "JobError",
    "JsonCodec",
    "KeyedAggregate",
    "KeyedOperator",
    "Max",
    "Mean",
    "Min",
    "Prepared",
    "Recompute",
    "Session",
    "Sliding",
    "Stage",
    "StateView",
    "Sum",
    "TimeDomain",
    "TopK",
    "Tumbling",
    "WindowedAggregate",
    "load_job",
    "once_per_jvm",
]

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
"""The columns of the Kafka rows `parse` receives. It must keep `value`, `topic`, `partition` and
`offset` (a dead letter names its source record by them); the operator sees every column but
`value`, `timestampType`, `reject_reason` and Kafka's `key` (unless the operator keys by `key`)."""


class JobError(ValueError):
    """A job that cannot run, with what is wrong in its declaration."""


STAGE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


@dataclass(frozen=True)
class Stage:
    """A further keyed elastic stage of a job: it takes the previous stage's output rows (its
    operator's output columns), re-keyed by `rekey`, within the same micro-batch. It has its
    own layout, channels, state, probes, metrics and rescale requests (`esp stream rescale --stage`);
    rescaling it never touches another stage's state."""

    name: str
    """The stage's name (lower case, digits, `_`): its folders, metrics and rescale requests use it."""
    operator: KeyedOperator[Any]
    """The stage's keyed stateful operator; its `key_column` must be a string column of `rekey`'s rows."""
    rekey: Callable[[DataFrame], DataFrame] | None = None
    """The previous stage's output rows → this stage's input rows, in the JVM (select, derive the key,
    pre-aggregate); None: the rows as they are (they must have the operator's key column)."""
    weight_column: str | None = None
    """How many records a row of this stage's input stands for (None: one), as `Job.weight_column`."""
    channels: int | None = None
    """The stage's channels when the stream first starts (None: the stream's `channels`)."""

    def __post_init__(self) -> None:
        if self.channels is not None and not 1 <= self.channels <= 1024:
            raise JobError(f"stage {self.name}: channels must be within 1..1024, not {self.channels}")
        if not STAGE_NAME.match(self.name) or self.name == FIRST_STAGE:
            raise JobError(
                f"stage name {self.name!r}: lower-case letters, digits and '_', at most 32, not {FIRST_STAGE!r}"
            )
        if not isinstance(self.operator, KeyedOperator):
            raise JobError(f"stage {self.name}: operator must be a KeyedOperator, not {type(self.operator).__name__}")
        _check_operator(self.operator, f"stage {self.name}'s operator")


@dataclass(frozen=True)
class Prepared:
    """A batch's input for the operator, and rows set aside as late (kept in the stream's late
    table, never dropped; rows with an `n` column count `n` records each)."""

    rows: DataFrame
    late: DataFrame | None = None


@dataclass(frozen=True)
class Recompute:
    """How a job's results are recomputed in batch from the stream's archive, one UTC day at a time:
    the daily backfill, and what the stream's results are reconciled with, row by row.

    Both sides keep the result rows whose `day_column` falls on the day: the stream's latest view
    (one row per result key) and `results` applied to the archived rows of the day and of the
    days before and after it (a window or session that starts on a day may take rows from its
    neighbours; spans longer than a day are not supported). A day is reconciled once the day
    after it has closed."""

    results: Callable[[DataFrame], DataFrame]
    """Archived rows (the archive's columns and `date`) → result rows: the result key columns,
    `day_column` and `compared_columns`, computed as the stream computes them."""
    day_column: str
    """An int64 epoch-ms column of the result rows that dates each row to a UTC day."""
    compared_columns: tuple[str, ...] = ()
    """Result columns besides the key that must be equal on both sides (exactly: round floats)."""


@dataclass(frozen=True)
class Job:
    """One elastic job, as a stream runs it."""

    parse: Callable[[DataFrame], DataFrame]
    """Kafka rows (probes set apart) → the same rows with the job's typed columns added and a
    `reject_reason` column: null for a good row, else why it is rejected (it is dead-lettered)."""
    operator: KeyedOperator[Any]
    """The keyed stateful operator of the elastic stage; its `key_column` must be a string column of `parse`'s rows."""
    result_key_columns: tuple[str, ...]
    """Output columns that identify a result row: a key's newest row is its current value."""
    event_time_column: str | None = None
    """An int64 epoch-ms column of the good rows that moves the watermark (None: event-time timers never fire)."""
    allowed_lateness_ms: int = 0
    """How far the watermark stays behind the largest event time seen in earlier batches."""
    archive: Callable[[DataFrame], DataFrame] | None = None
    """Good rows → the bronze archive's rows with a `date` (yyyy-MM-dd) column; None: the operator's
    input columns, dated by the Kafka timestamp."""
    prepare: Callable[[DataFrame, BatchTimes], Prepared] | None = None
    """A batch's good rows and its recorded times → the operator's input, e.g. pre-aggregated in the
    JVM (so Python sees one row per key, not per record), and rows set aside as late; None: the
    good rows as they are. The watermark is `NO_WATERMARK_MS` until an event time was seen."""
    results: Callable[[DataFrame], DataFrame] | None = None
    """The operator's output rows (plus `channel` and `batch_id`) → the results table's rows; None: as they are."""
    weight_column: str | None = None
    """A column of the operator's input saying how many input records a row stands for (rows
    pre-aggregated by `prepare`): the stage's per-channel records, the load the controller sees,
    are its sums. None: one record per row."""
    expectations: Callable[[], list[Any]] | None = None
    """Great Expectations (GX 1.x expectation objects) on the latest view of the results, checked by
    the stream's generated `results_suite` check beside esp's own (keys not null, one row per key)."""
    recompute: Recompute | None = None
    """The job's daily batch recomputation (the stream's `<name>_daily_counts` asset, its nightly
    backfill and `reconciliation` check); None: the stream has no daily backfill."""
    stages: tuple[Stage, ...] = ()
    """Further keyed stages after the first, in order: stage k+1 takes stage k's output rows; the last
    stage's output rows are what `results` shapes (or the results table's rows)."""

    def __post_init__(self) -> None:
        if not isinstance(self.operator, KeyedOperator):
            raise JobError(f"operator must be a KeyedOperator, not {type(self.operator).__name__}")
        _check_operator(self.operator, "the operator")
        outputs = self.last_operator.output_schema.names
        if not self.result_key_columns:
            raise JobError("result_key_columns is empty: name the output columns that identify a result row")
        if self.results is None and (missing := [c for c in self.result_key_columns if c not in outputs]):
            raise JobError(f"result_key_columns {missing} are not in the last operator's output schema {outputs}")
        if self.allowed_lateness_ms < 0:
            raise JobError(f"allowed_lateness_ms must be >= 0, not {self.allowed_lateness_ms}")
        names = [stage.name for stage in self.stages]
        if duplicates := sorted({n for n in names if names.count(n) > 1}):
            raise JobError(f"stage names {duplicates} are used twice; each stage needs its own")
        self._check_chain()

    def _check_chain(self) -> None:
        """A stage without `rekey` takes the previous output as it is: it must hold its key column."""
        previous = self.operator
        for stage in self.stages:
            produced = previous.output_schema.names
            if stage.rekey is None and stage.operator.key_column not in produced:
                raise JobError(
                    f"stage {stage.name}: key column {stage.operator.key_column!r} is not in the previous stage's "
                    f"output {produced}; give the stage a `rekey`"
                )
            previous = stage.operator

    @property
    def last_operator(self) -> KeyedOperator[Any]:
        """The operator whose output rows become the results."""
        return self.stages[-1].operator if self.stages else self.operator

    @property
    def stage_names(self) -> tuple[str, ...]:
        """Every elastic stage's name, in order (`FIRST_STAGE` first)."""
        return (FIRST_STAGE, *(stage.name for stage in self.stages))

    @property
    def result_key(self) -> str:
        """The Kafka key of a result record."""
        return self.result_key_columns[0]


def _check_operator(operator: KeyedOperator[Any], what: str) -> None:
    outputs = operator.output_schema.names
    if clashes := sorted(RESERVED_OUTPUT_COLUMNS & set(outputs)):
        raise JobError(f"{what}'s output schema uses esp's reserved columns {clashes}; rename them")
    if operator.key_column in RESERVED_INPUT_COLUMNS:
        raise JobError(f"{what}'s key_column {operator.key_column!r} is reserved by esp; use another name")


def load_job(reference: str, search_path: str | None = None) -> Job:
    """The `Job` a `module:function` reference builds; a `JobError` saying what is wrong otherwise.

    The module is looked up in `search_path` (default: the working directory) before the installed
    packages, as `uvicorn --app-dir` does: a job module beside the stream's configuration needs no
    install. Its top-level package is pickled by value into Spark's Python workers, so it runs
    there unchanged too."""
    if not JOB_REFERENCE.match(reference):
        raise JobError(f"job {reference!r} is not a 'module:function' reference (e.g. 'examples.sessions.job:job')")
    module_name, function_name = reference.split(":")
    folder = os.path.abspath(search_path or os.getcwd())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise JobError(f"job {reference!r}: cannot import {module_name!r} ({error}); is it on the path?") from None
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise JobError(f"job {reference!r}: {module_name} has no function {function_name!r}")
    job = factory()
    if not isinstance(job, Job):
        raise JobError(f"job {reference!r} returned {type(job).__name__}, not a pipelines.api.Job")
    _ship_by_value(module_name)
    return job


_ESP_PACKAGES = frozenset({"elasticity", "pipelines", "orchestration", "benchmarks"})


def _ship_by_value(module_name: str) -> None:
    top = module_name.split(".")[0]
    if top not in _ESP_PACKAGES:  # esp's own packages are installed where the workers run
        cloudpickle.register_pickle_by_value(sys.modules[top])
