"""`esp infra …`, `esp topics …` and `esp ui`: the local stack from the command line."""

from __future__ import annotations

import os
import subprocess
from typing import Annotated

import typer
from rich.table import Table

from orchestration.cli.common import ConfigOption, console, friendly_errors

infra_app = typer.Typer(
    help="Start, stop and inspect the local stack (Kafka KRaft broker, jars).", no_args_is_help=True
)
topics_app = typer.Typer(help="Kafka topics.", no_args_is_help=True)


@infra_app.command("jars")
def jars(config: ConfigOption = None, force: bool = typer.Option(False, help="Resolve again even if present.")) -> None:
    """Resolve the Kafka broker and Spark connector jars from Maven Central (no-op when present)."""
    from orchestration.stack.jvm import ensure_jars
    from orchestration.stack.project import jvm_layout, load_settings

    with friendly_errors():
        layout = jvm_layout(load_settings(config))
        with console.status("resolving jars with Maven…"):
            ran = ensure_jars(layout, force=force)
        console.print(f"jars {'resolved' if ran else 'already present'} in {layout.jars_dir}")


@infra_app.command("up")
def up(config: ConfigOption = None) -> None:
    """Start the Kafka broker (formats storage the first time) and wait until it answers."""
    from orchestration.stack.jvm import ensure_jars
    from orchestration.stack.kafka_broker import BrokerAlreadyRunning
    from orchestration.stack.project import jvm_layout, kafka_broker, load_settings

    with friendly_errors():
        settings = load_settings(config)
        ensure_jars(jvm_layout(settings))
        broker = kafka_broker(settings)
        try:
            with console.status(f"starting Kafka on {settings.kafka.bootstrap_servers}…"):
                status = broker.up()
        except BrokerAlreadyRunning as already:
            console.print(f"[yellow]{already}[/]")
            return
        console.print(f"[green]Kafka is up[/] on {status.bootstrap_servers} (pid {status.pid})")


@infra_app.command("down")
def down(config: ConfigOption = None) -> None:
    """Stop the Kafka broker esp started (by its pid)."""
    from orchestration.stack.project import kafka_broker, load_settings

    with friendly_errors():
        stopped = kafka_broker(load_settings(config)).down()
        console.print("[green]Kafka stopped[/]" if stopped else "Kafka was not running")


@infra_app.command("status")
def status(config: ConfigOption = None) -> None:
    """Report whether the broker runs and answers; exit code 3 when it is down."""
    from orchestration.stack.project import kafka_broker, load_settings

    with friendly_errors():
        state = kafka_broker(load_settings(config)).status()
    table = Table("component", "state", "pid", "address", "note")
    label = (
        "[green]running[/]"
        if state.running and state.answering
        else ("[yellow]not answering[/]" if state.running else "[red]stopped[/]")
    )
    table.add_row("kafka", label, str(state.pid or "-"), state.bootstrap_servers, state.note)
    console.print(table)
    if not state.running:
        raise typer.Exit(code=3)


@topics_app.command("create")
def create_topics(
    names: Annotated[list[str], typer.Argument(help="Topic names.")],
    partitions: int = typer.Option(4, "--partitions", "-p", min=1, help="Partitions per topic."),
    retention_hours: float = typer.Option(
        168.0, "--retention-hours", min=0.01, help="Records older than this are deleted (input topics: 7 days)."
    ),
    config: ConfigOption = None,
) -> None:
    """Create topics (idempotent; an existing topic with another partition count is an error;
    an existing topic keeps its retention)."""
    from orchestration.stack.project import load_settings
    from pipelines.kafka_topics import TopicSpec, ensure_topics, retention_configs

    with friendly_errors():
        settings = load_settings(config)
        configs = retention_configs(retention_hours)
        specs = [TopicSpec(name=n, partitions=partitions, configs=configs) for n in names]
        created = ensure_topics(settings.kafka.connection, specs)
    for name in names:
        console.print(f"{name}: {'created' if name in created else 'exists'} ({partitions} partitions)")


@topics_app.command("list")
def list_topics(config: ConfigOption = None) -> None:
    """List topics with their partition counts."""
    from orchestration.stack.project import load_settings
    from pipelines.kafka_topics import topic_partition_counts

    with friendly_errors():
        counts = topic_partition_counts(load_settings(config).kafka.connection)
    table = Table("topic", "partitions")
    for name, count in sorted(counts.items()):
        table.add_row(name, str(count))
    console.print(table)


def ui_command(
    config: ConfigOption = None,
    port: int = typer.Option(3000, help="Port of the Dagster webserver."),
    host: str = typer.Option("127.0.0.1", help="Address the webserver binds to."),
) -> None:
    """Start the Dagster webserver and daemon (`dagster dev`) with DAGSTER_HOME in the run folder."""
    from orchestration.stack.dagster_home import dagster_env, prepare_dagster_home
    from orchestration.stack.kafka_broker import ensure_port_free
    from orchestration.stack.project import load_settings

    with friendly_errors():
        settings = load_settings(config)
        ensure_port_free(host, port)
        home = prepare_dagster_home(settings)
    console.print(f"Dagster UI: [bold]http://{host}:{port}[/]  (DAGSTER_HOME={home})")
    workspace = settings.project_root / "workspace.yaml"
    command = ["dagster", "dev", "-w", str(workspace), "-h", host, "-p", str(port)]
    raise typer.Exit(subprocess.call(command, cwd=settings.project_root, env=dagster_env(settings, os.environ)))
