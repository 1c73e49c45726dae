"""Great Expectations, called directly (GX 1.x; dagster-ge supports only GX < 1).

`GreatExpectationsResource` builds one ephemeral GX context per run (analytics off) and
validates Spark or pandas DataFrames against a list of expectations. `SuiteOutcome` is GX's
answer reduced to what a Dagster check shows: statistics, one line per expectation, and the
offending rows identified by their key columns.

GX is imported only when a run needs it: importing it takes seconds, and the code location
should load fast.
"""

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr


def import_gx() -> Any:
    """Import great_expectations safely in any process.

    GX imports `pyspark.sql.connect`, whose `check_dependencies` takes a process whose
    `__main__` has neither `__spec__` nor `__file__` for a doctest run and calls `sys.exit(0)`
    when Spark Connect's extras (google.rpc) are missing. Dagster's step subprocesses look
    exactly like that, so the step would vanish with exit code 0. Giving `__main__` a file name
    (for the rest of this step process: GX imports Connect modules lazily) avoids it.
    """
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__spec__", None) is None and not hasattr(main, "__file__"):
        main.__file__ = "<esp step process>"
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations

    return great_expectations


@dataclass
class ExpectationOutcome:
    """One evaluated expectation."""

    expectation: str
    column: str | None
    success: bool
    unexpected_count: int | None = None
    unexpected_percent: float | None = None
    offending: list[dict[str, Any]] = field(default_factory=list)
    observed_value: Any = None


@dataclass
class SuiteOutcome:
    """One validated suite: GX's statistics and every expectation's outcome."""

    suite: str
    success: bool
    statistics: dict[str, Any]
    expectations: list[ExpectationOutcome]

    @property
    def failed(self) -> list[ExpectationOutcome]:
        return [e for e in self.expectations if not e.success]

    def offending_keys(self, limit: int) -> list[dict[str, Any]]:
        """The offending rows of all failed expectations (deduplicated, at most `limit`)."""
        seen, keys = set(), []
        for outcome in self.failed:
            for row in outcome.offending:
                marker = repr(sorted(row.items()))
                if marker not in seen:
                    seen.add(marker)
                    keys.append({"expectation": outcome.expectation, **row})
        return keys[:limit]


def _plain(value: Any) -> Any:
    """JSON-friendly scalars for Dagster metadata (timestamps, numpy numbers)."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "item"):
        return value.item()
    return value


def summarize(suite_name: str, result: Any, limit: int) -> SuiteOutcome:
    """Reduce a GX `ExpectationSuiteValidationResult` to a `SuiteOutcome`."""
    outcomes = []
    for item in result.results:
        config, details = item.expectation_config, item.result or {}
        rows = details.get("unexpected_index_list") or []
        offending = [{k: _plain(v) for k, v in row.items()} for row in rows[:limit] if isinstance(row, dict)]
        outcomes.append(
            ExpectationOutcome(
                expectation=config.type,
                column=config.kwargs.get("column") or _columns(config.kwargs),
                success=bool(item.success),
                unexpected_count=details.get("unexpected_count"),
                unexpected_percent=details.get("unexpected_percent"),
                offending=offending,
                observed_value=_plain(details.get("observed_value")),
            )
        )
    statistics = {k: _plain(v) for k, v in dict(result.statistics).items()}
    return SuiteOutcome(suite_name, bool(result.success), statistics, outcomes)


def _columns(kwargs: dict[str, Any]) -> str | None:
    if "column_list" in kwargs:
        return ", ".join(kwargs["column_list"])
    if "column_A" in kwargs:
        return f"{kwargs['column_A']} = {kwargs['column_B']}"
    return None


class GreatExpectationsResource(ConfigurableResource):
    """One ephemeral Great Expectations context per run; validates DataFrames against suites."""

    offending_rows_limit: int = Field(
        50, ge=1, description="At most this many offending rows per expectation in metadata."
    )

    _context: Any = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # GX reads the flag when it is imported and when a context is built: set it before both.
        os.environ["GX_ANALYTICS_ENABLED"] = "false"
        gx = import_gx()
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self._context = gx.get_context(mode="ephemeral")
        # tqdm bars would flood the run's captured logs; Dagster shows the outcome instead.
        self._context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)

    @property
    def context(self) -> Any:
        if self._context is None:  # used outside a Dagster run (tests, scripts)
            self.setup_for_execution(None)  # type: ignore[arg-type]
        return self._context

    def validate(self, frame: Any, suite_name: str, expectations: list[Any], index_columns: list[str]) -> SuiteOutcome:
        """Validate a Spark or pandas DataFrame; offending rows are named by `index_columns`."""
        gx = import_gx()

        batch_definition = self._batch_definition(frame, suite_name)
        suite = gx.ExpectationSuite(name=suite_name)
        for expectation in expectations:
            suite.add_expectation(expectation)
        suite = self.context.suites.add_or_update(suite)
        batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
        result_format = {"result_format": "COMPLETE", "unexpected_index_column_names": index_columns}
        return summarize(suite_name, batch.validate(suite, result_format=result_format), self.offending_rows_limit)

    def _batch_definition(self, frame: Any, asset_name: str) -> Any:
        is_spark = type(frame).__module__.startswith("pyspark")
        kind = "spark" if is_spark else "pandas"
        sources = self.context.data_sources
        try:
            source = sources.get(kind)
        except (KeyError, ValueError, LookupError):
            source = sources.add_spark(kind) if is_spark else sources.add_pandas(kind)
        try:
            asset = source.get_asset(asset_name)
        except (KeyError, ValueError, LookupError):
            asset = source.add_dataframe_asset(asset_name)
        try:
            return asset.get_batch_definition("whole")
        except (KeyError, ValueError, LookupError):
            return asset.add_batch_definition_whole_dataframe("whole")
