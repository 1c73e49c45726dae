"""`esp bench …`: benchmarks that write JSON and PNG results side by side in one run."""

from __future__ import annotations

import typer

bench_app = typer.Typer(help="Benchmarks (JSON + PNG output, ratios in one run).", no_args_is_help=True)
