"""The post-rescale state check, without Dagster: take a census of the elastic stage's state
under the committed layout, compare it with the stream's own report of that state (the results
table's latest view up to the same batch), and validate both with GX.

Why the results table is the baseline for "the sum of counts is unchanged by the rescale": a
rescale runs at a batch boundary and the stream writes, for every key a batch touches, the new
count to the results table. So the latest results row of every key up to batch B *is* the state
at batch B, as the stream saw it before any later rescale moved it. A lost, duplicated or
altered key after the rescale makes the sums (and the per-key values) differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from elasticity.state import Location
from orchestration.names import state_suite_name
from orchestration.quality.gx_validation import GreatExpectationsResource, SuiteOutcome
from orchestration.quality.state_census import COUNT_VALUE, STORED_BYTES, StateCensus, ValueOf, take_census
from orchestration.quality.suites import state_expectations
from pipelines.batch.pipelines import BatchPipeline
from pipelines.jobs.keys import SEPARATOR
from pipelines.streams.compaction import compacted_upto
from pipelines.streams.spec import StreamSpec

if TYPE_CHECKING:  # pandas (~2 s to import) loads only where a check runs, not in every run worker
    import pandas as pd


@dataclass
class StateCheck:
    census: StateCensus
    suite: SuiteOutcome
    baseline: dict[str, int] | None
    differing_keys: list[dict[str, Any]] = field(default_factory=list)
    value_name: str = "counts"
    """What the census' `value` column holds."""

    @property
    def passed(self) -> bool:
        return self.suite.success and not self.differing_keys and not self.census.stray_channels


def _state_keys(pipeline: BatchPipeline, rows: pd.DataFrame) -> pd.Series:
    """The elastic stage's key of each results row (see `pipelines.streams.jobs`)."""
    import pandas as pd

    if pipeline.window_columns is None:
        return rows[pipeline.key_columns[0]].astype(str)
    start = pd.to_datetime(rows[pipeline.window_columns[0]], utc=True)
    start_ms = (start - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    return rows["campaign_id"].astype(str) + SEPARATOR + start_ms.astype("int64").astype(str)


def results_complete(results_table: str, batch: int) -> bool:
    """Whether the stream finished writing batch `batch`'s results: Spark's _SUCCESS marker, or the
    batch was folded into a compacted folder (only committed batches are)."""
    if Location.of(results_table).child(f"batch_id={batch}").exists("_SUCCESS"):
        return True
    upto = compacted_upto(results_table)
    return upto is not None and batch <= upto


def has_results(results_table: str) -> bool:
    return any(name.startswith("batch_id=") for name in Location.of(results_table).names())


def results_state(pipeline: BatchPipeline, results_table: str, batch: int) -> pd.DataFrame:
    """(key, expected): every key's count in its newest results row up to batch `batch`.

    Read with pyarrow, not Spark: the check then runs inside a rescale run without starting a JVM.
    """
    import pandas as pd
    import pyarrow.dataset as ds

    columns = [*pipeline.key_columns, "count", "batch_id"]
    # The batch id is both a folder name and a column of the files; read the column.
    table = ds.dataset(results_table, format="parquet", partitioning=None, exclude_invalid_files=True)
    rows = table.to_table(columns=columns, filter=ds.field("batch_id") <= batch).to_pandas()
    rows = rows.sort_values("batch_id", kind="stable").drop_duplicates(list(pipeline.key_columns), keep="last")
    return pd.DataFrame(
        {"key": _state_keys(pipeline, rows).to_numpy(), "expected": rows["count"].astype("int64").to_numpy()}
    )


def _census(spec: StreamSpec, value_of: ValueOf = COUNT_VALUE) -> StateCensus:
    """The census at the newest batch whose results the stream finished writing."""
    with_results = has_results(spec.results_table)
    complete = (lambda b: results_complete(spec.results_table, b)) if with_results else (lambda b: True)
    return take_census(spec.elastic_root, batch_complete=complete, value_of=value_of)


def check_user_state(name: str, spec: StreamSpec, gx: GreatExpectationsResource) -> StateCheck:
    """A user job's state: each key (and its timers) stored once, in the channel its hash routes
    to. Its values are the operator's own; their stored sizes are shown, not compared."""
    census = _census(spec, STORED_BYTES)
    suite = gx.validate(census.rows, state_suite_name(name), state_expectations(None, None), ["key", "channel"])
    return StateCheck(census, suite, None, value_name="stored bytes")


def check_state(
    pipeline: BatchPipeline,
    spec: StreamSpec,
    gx: GreatExpectationsResource,
    limit: int = 50,
) -> StateCheck:
    """Census the state, build the baseline from the results table (if the stream wrote one),
    and validate."""
    with_results = has_results(spec.results_table)
    census = _census(spec)
    baseline, differing = None, []
    if with_results and census.batch >= 0:
        expected = results_state(pipeline, spec.results_table, census.batch)
        baseline = {"keys": int(len(expected)), "total": int(expected["expected"].sum()), "batch": census.batch}
        differing = differing_keys(census.rows, expected, limit)
    suite = gx.validate(
        census.rows,
        state_suite_name(pipeline.name),
        state_expectations(baseline and baseline["keys"], baseline and baseline["total"]),
        ["key", "channel"],
    )
    return StateCheck(census, suite, baseline, differing)


def differing_keys(state: pd.DataFrame, expected: pd.DataFrame, limit: int) -> list[dict[str, Any]]:
    """Keys whose stored value (summed over every channel holding it) differs from the baseline."""
    stored = state.groupby("key", as_index=False).agg(
        stored=("value", "sum"), channels=("channel", lambda c: sorted(set(c)))
    )
    merged = stored.merge(expected, on="key", how="outer")
    merged["stored"] = merged["stored"].fillna(0).astype("int64")
    merged["expected"] = merged["expected"].fillna(0).astype("int64")
    bad = merged[merged["stored"] != merged["expected"]].sort_values("key").head(limit)
    return [
        {
            "key": r.key,
            "stored": int(r.stored),
            "expected": int(r.expected),
            "channels": [int(c) for c in r.channels] if isinstance(r.channels, list) else [],
        }
        for r in bad.itertuples()
    ]
