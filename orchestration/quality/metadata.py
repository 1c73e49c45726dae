"""Turning check outcomes into Dagster metadata the UI shows: GX statistics, one table row per
expectation, unexpected counts, and the offending keys."""

from typing import Any

from dagster import MetadataValue

from orchestration.quality.gx_validation import SuiteOutcome


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|")[:120]


def expectations_table(outcome: SuiteOutcome) -> str:
    lines = [
        "| expectation | column | success | unexpected | observed | first offending |",
        "|---|---|---|---|---|---|",
    ]
    for e in outcome.expectations:
        first = e.offending[0] if e.offending else None
        lines.append(
            f"| {e.expectation} | {_cell(e.column)} | {'✅' if e.success else '❌'} | {_cell(e.unexpected_count)} "
            f"| {_cell(e.observed_value)} | {_cell(first)} |"
        )
    return "\n".join(lines)


def suite_metadata(outcome: SuiteOutcome, limit: int) -> dict[str, Any]:
    stats = outcome.statistics
    return {
        "gx_suite": outcome.suite,
        "gx_evaluated_expectations": int(stats.get("evaluated_expectations", 0)),
        "gx_successful_expectations": int(stats.get("successful_expectations", 0)),
        "gx_unsuccessful_expectations": int(stats.get("unsuccessful_expectations", 0)),
        "gx_success_percent": MetadataValue.float(float(stats.get("success_percent") or 0.0)),
        "gx_expectations": MetadataValue.md(expectations_table(outcome)),
        "gx_unexpected_counts": MetadataValue.json(
            {
                f"{e.expectation}({e.column})": e.unexpected_count
                for e in outcome.expectations
                if e.unexpected_count is not None
            }
        ),
        "offending_keys": MetadataValue.json(outcome.offending_keys(limit)),
    }


def failure_description(outcome: SuiteOutcome) -> str:
    if outcome.success:
        return f"all {len(outcome.expectations)} expectations of {outcome.suite} passed"
    failed = ", ".join(f"{e.expectation}({e.column})" for e in outcome.failed)
    return f"{len(outcome.failed)} of {len(outcome.expectations)} expectations failed: {failed}"
