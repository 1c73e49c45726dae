"""Print the sessions stream's results as the example's report: per landing page, the number of
closed sessions and their mean duration. `python -m examples.sessions.summary [results folder]`.

Reads the results table with pyarrow (no Spark needed): every row is one closed session.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import typer
from rich.console import Console
from rich.table import Table

from examples.sessions.oracle import page_summary

DEFAULT_RESULTS = Path(".esp/run/streams/sessions/tables/results")


def main(results: Path = typer.Argument(DEFAULT_RESULTS, help="The stream's results table folder.")) -> None:
    columns = ["user_id", "landing_page", "session_start_ms", "session_end_ms", "clicks"]
    table = ds.dataset(results, format="parquet", partitioning=None, exclude_invalid_files=True).to_table(columns)
    sessions = [tuple(row.values()) for row in table.to_pylist()]
    report = Table("landing page", "sessions", "mean duration (s)", title=f"{len(sessions)} closed sessions")
    for page, (count, mean_ms) in sorted(page_summary(sessions).items()):
        report.add_row(page, str(count), f"{mean_ms / 1000:.1f}")
    Console().print(report)


if __name__ == "__main__":
    typer.run(main)
