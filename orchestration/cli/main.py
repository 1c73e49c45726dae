"""The `esp` command line's root: one Typer app with a sub-command group per area.

This module is the composition root: the only product module that mounts the benchmark package
(`esp bench …`), which lives apart from the product in `benchmarks/`.
"""

from __future__ import annotations

import typer

from benchmarks.cli import bench_app
from benchmarks.soak_command import soak_command
from orchestration.cli.backfill import backfill_command
from orchestration.cli.infra import infra_app, topics_app, ui_command
from orchestration.cli.k8s import k8s_app
from orchestration.cli.load import load_app
from orchestration.cli.status import status_command
from orchestration.cli.stream import stream_app

app = typer.Typer(
    name="esp",
    help="esp, the elastic stream platform: elastic Spark stream jobs over Kafka, run by Dagster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(infra_app, name="infra")
app.add_typer(topics_app, name="topics")
app.add_typer(bench_app, name="bench")
app.add_typer(stream_app, name="stream")
app.add_typer(load_app, name="load")
app.add_typer(k8s_app, name="k8s")
app.command("ui")(ui_command)
app.command("backfill")(backfill_command)
app.command("soak")(soak_command)
app.command("status")(status_command)

__all__ = ["app"]
