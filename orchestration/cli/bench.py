"""`esp bench …`: benchmarks that write JSON and PNG results side by side in one run."""

from __future__ import annotations

import typer

from orchestration.cli.bench_elasticity import elasticity_command
from orchestration.cli.bench_rescale import rescale_command
from orchestration.cli.bench_ring import ring_command
from orchestration.cli.bench_simulate import simulate_command
from orchestration.cli.bench_throughput import throughput_command

bench_app = typer.Typer(help="Benchmarks (JSON + PNG output, ratios in one run).", no_args_is_help=True)
bench_app.command("ring")(ring_command)
bench_app.command("simulate")(simulate_command)
bench_app.command("elasticity")(elasticity_command)
bench_app.command("rescale")(rescale_command)
bench_app.command("throughput")(throughput_command)
