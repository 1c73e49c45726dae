"""`esp backfill`: recompute a pipeline's daily batch tables for a range of days.

    esp backfill --pipeline wordcount --from 2026-11-01 --to 2026-11-03

Each day is one materialization of the daily-partitioned asset `<pipeline>_daily_counts`,
run in this process and recorded in esp's Dagster instance (so the UI shows the partitions).
See `orchestration.backfills.runner` for why in-process.
"""

from __future__ import annotations

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from orchestration.cli.common import ConfigOption, console, friendly_errors


def _instance(settings, ephemeral: bool):
    from dagster import DagsterInstance

    from orchestration.stack.dagster_home import prepare_dagster_home

    if ephemeral:
        return DagsterInstance.ephemeral()
    return DagsterInstance.from_config(str(prepare_dagster_home(settings)))


def _summary(outcomes) -> Table:
    table = Table(title="backfill")
    for column in ("day", "status", "bronze rows", "rows written", "total count"):
        table.add_column(column, justify="right" if column != "status" else "left")
    for o in outcomes:
        status = "[green]ok[/]" if o.success else f"[red]failed[/] {o.error or ''}"
        m = o.metadata
        table.add_row(
            o.day.isoformat(),
            status,
            str(m.get("bronze_rows", "")),
            str(m.get("rows", "")),
            str(m.get("total_count", "")),
        )
    return table


def backfill_command(
    pipeline: str = typer.Option(..., "--pipeline", "-p", help="Pipeline to recompute: wordcount | adclicks."),
    start: str = typer.Option(..., "--from", help="First day, YYYY-MM-DD (UTC)."),
    end: str | None = typer.Option(None, "--to", help="Last day, YYYY-MM-DD (UTC), inclusive; default: --from."),
    stream_root: str | None = typer.Option(
        None, "--stream-root", help="The stream's folder (path or file:// URI); default: <run dir>/streams/<pipeline>."
    ),
    ephemeral: bool = typer.Option(False, "--ephemeral", help="Do not record the runs in esp's Dagster instance."),
    config: ConfigOption = None,
) -> None:
    """Recompute a pipeline's daily tables from its bronze archive, one partition per day."""
    with friendly_errors():
        from orchestration.backfills.runner import BackfillError, plan_backfill, run_backfill
        from orchestration.stack.project import load_settings

        settings = load_settings(config)
        try:
            plan = plan_backfill(settings, pipeline, start, end or start, stream_root=stream_root)
        except BackfillError as error:
            raise ValueError(str(error)) from None
        if plan.empty_days:
            console.print(
                f"[yellow]note:[/] no bronze data on {', '.join(d.isoformat() for d in plan.empty_days)}: "
                "those partitions will be empty"
            )
        console.print(
            f"backfilling [bold]{plan.pipeline.name}[/] {plan.days[0]} → {plan.days[-1]} "
            f"({len(plan.days)} day(s)) from {plan.spec.bronze_table}"
        )
        instance = _instance(settings, ephemeral)
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            task = progress.add_task(f"{plan.pipeline.name} daily", total=len(plan.days))

            def on_day(outcome) -> None:
                mark = "[green]✓[/]" if outcome.success else "[red]✗[/]"
                detail = (
                    f"{outcome.metadata.get('rows', 0)} rows, total {outcome.metadata.get('total_count', 0)}"
                    if outcome.success
                    else outcome.error
                )
                progress.console.print(f"{mark} {outcome.day} {detail}")
                progress.advance(task)

            outcomes = run_backfill(plan, settings_file=config, instance=instance, on_day=on_day)
        console.print(_summary(outcomes))
        failed = [o for o in outcomes if not o.success]
        if failed:
            console.print(f"[bold red]error:[/] {len(failed)} of {len(outcomes)} day(s) failed")
            raise typer.Exit(code=1)
