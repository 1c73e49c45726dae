"""`esp bench …`: benchmarks that write JSON and PNG results side by side in one run."""

from __future__ import annotations

import typer

from benchmarks.admission_command import admission_command
from benchmarks.checkpoint_command import checkpoint_command
from benchmarks.elasticity_command import elasticity_command
from benchmarks.floor_command import floor_command
from benchmarks.multistage_command import multistage_command
from benchmarks.operator_command import operator_command
from benchmarks.rescale_command import rescale_command
from benchmarks.ring_command import ring_command
from benchmarks.simulate_command import simulate_command
from benchmarks.throughput_command import throughput_command

bench_app = typer.Typer(help="Benchmarks (JSON + PNG output, ratios in one run).", no_args_is_help=True)
bench_app.command("ring")(ring_command)
bench_app.command("simulate")(simulate_command)
bench_app.command("elasticity")(elasticity_command)
bench_app.command("rescale")(rescale_command)
bench_app.command("throughput")(throughput_command)
bench_app.command("admission")(admission_command)
bench_app.command("checkpoint")(checkpoint_command)
bench_app.command("operator")(operator_command)
bench_app.command("multistage")(multistage_command)
bench_app.command("floor")(floor_command)
