"""`esp infra …`, `esp topics …` and `esp ui`: the local stack from the command line."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.table import Table

from orchestration.cli.common import ConfigOption, console, friendly_errors

if TYPE_CHECKING:
    from orchestration.stack.kafka_broker import BrokerStatus
    from orchestration.stack.kafka_cluster import KafkaCluster
    from orchestration.stack.object_store import ObjectStoreServer
    from orchestration.stack.postgres import PostgresServer
    from orchestration.stack.spark_cluster import DaemonStatus, SparkCluster
    from pipelines.settings import EspSettings, Profile

_Status = TypeVar("_Status")

ProfileOption = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="local or cluster (3 Kafka nodes, Spark standalone, PostgreSQL, object store); default: $ESP_PROFILE, "
        "else the settings file's profile.",
    ),
]

infra_app = typer.Typer(
    help="Start, stop and inspect the local stack (Kafka KRaft broker or cluster, Dagster's PostgreSQL, "
    "the Spark standalone cluster, jars).",
    no_args_is_help=True,
)
topics_app = typer.Typer(help="Kafka topics.", no_args_is_help=True)


@infra_app.command("jars")
def jars(
    config: ConfigOption = None,
    force: bool = typer.Option(False, help="Resolve again even if present."),
    object_store: bool = typer.Option(
        False, help="Also Hadoop's s3a connector (~690 MB), for stream folders on an object store."
    ),
) -> None:
    """Resolve the Kafka broker and Spark Kafka connector jars from Maven Central (no-op when
    present); the s3a connector too with --object-store, or when the settings put streams on one."""
    from orchestration.stack.jvm import ensure_jars
    from orchestration.stack.project import jvm_layout, load_settings

    with friendly_errors():
        settings = load_settings(config)
        layout = jvm_layout(settings)
        with console.status("resolving jars with Maven…"):
            ran = ensure_jars(layout, force=force, object_store=object_store or _needs_s3a(settings))
        console.print(f"jars {'resolved' if ran else 'already present'} in {layout.jars_dir}")


@infra_app.command("up")
def up(config: ConfigOption = None, profile: ProfileOption = None) -> None:
    """Start Dagster's PostgreSQL (with `dagster_storage: postgres`; created the first time), the
    object store (with `object_store.server.enabled`), then the Kafka broker, or with `kafka.nodes: 3`
    the cluster's stopped nodes (formats storage the first time), then with `spark_cluster.enabled`
    the Spark master and workers, each waited for until it answers. `--profile cluster` turns on
    all of them."""
    from orchestration.stack.jvm import ensure_jars
    from orchestration.stack.kafka_broker import BrokerAlreadyRunning
    from orchestration.stack.project import jvm_layout, kafka_broker, load_settings

    with friendly_errors():
        settings = load_settings(config, _profile(profile))
        if settings.dagster_storage == "postgres":
            _postgres_up(settings)
        if settings.object_store.server.enabled:
            _object_store_up(settings)
        ensure_jars(jvm_layout(settings), object_store=_needs_s3a(settings))
        if settings.kafka.nodes > 1:
            _kafka_cluster_up(settings)
        else:
            status = _start("Kafka", settings.kafka.bootstrap_servers, kafka_broker(settings).up, BrokerAlreadyRunning)
            if status is not None:
                console.print(f"[green]Kafka is up[/] on {status.bootstrap_servers} (pid {status.pid})")
        if settings.spark_cluster.enabled:
            _spark_cluster_up(settings)


def _needs_s3a(settings: EspSettings) -> bool:
    """Streams whose folders are on an object store: Spark reaches them through the s3a jars."""
    from elasticity.state import uris

    return settings.object_store.server.enabled or not uris.is_local(settings.streams_folder)


def _profile(name: str | None) -> Profile | None:
    if name is None or name in ("local", "cluster"):
        return name  # type: ignore[return-value]  # checked just above
    raise typer.BadParameter(f"unknown profile {name!r}: choose local or cluster", param_hint="--profile")


def _object_store(settings: EspSettings) -> ObjectStoreServer:
    from orchestration.stack.object_store import ObjectStoreServer

    return ObjectStoreServer(settings.object_store.server, settings.run_dir)


def _object_store_in_use(settings: EspSettings, store: ObjectStoreServer) -> bool:
    """The local object store is enabled, or esp started it once: it is stopped and shown either way."""
    return settings.object_store.server.enabled or store.root.exists()


def _object_store_up(settings: EspSettings) -> None:
    from orchestration.stack.object_store import ObjectStoreAlreadyRunning

    store = _object_store(settings)
    state = _start("the object store", store.address, store.up, ObjectStoreAlreadyRunning)
    if state is not None:
        bucket = settings.object_store.server.bucket
        console.print(f"[green]Object store is up[/] on {state.address} (pid {state.pid}), bucket {bucket}")


def _spark_cluster(settings: EspSettings) -> SparkCluster:
    from orchestration.stack.spark_cluster import SparkCluster

    return SparkCluster(settings.spark_cluster, settings.run_dir)


def _spark_cluster_in_use(settings: EspSettings, cluster: SparkCluster) -> bool:
    """The Spark cluster is enabled, or esp started it once: it is stopped and shown either way."""
    return settings.spark_cluster.enabled or cluster.root.exists()


def _spark_cluster_up(settings: EspSettings) -> None:
    from orchestration.stack.spark_cluster import SparkClusterAlreadyRunning

    cluster = settings.spark_cluster
    what = f"the Spark cluster ({cluster.workers} workers)"
    daemons = _start(what, cluster.master_url, _spark_cluster(settings).up, SparkClusterAlreadyRunning)
    if daemons is not None:
        pids = ", ".join(f"{name} {state.pid}" for name, state in daemons.items())
        console.print(f"[green]Spark cluster is up[/] at {cluster.master_url}, UI {cluster.webui_url} (pids: {pids})")


def _kafka_cluster(settings: EspSettings) -> KafkaCluster:
    from orchestration.stack.kafka_cluster import KafkaCluster
    from orchestration.stack.project import jvm_layout

    return KafkaCluster(settings.kafka, settings.run_dir, jvm_layout(settings))


def _kafka_cluster_up(settings: EspSettings) -> None:
    from orchestration.stack.kafka_cluster import KafkaClusterAlreadyRunning

    what = f"the {settings.kafka.nodes}-node Kafka cluster"
    nodes = _start(what, settings.kafka.bootstrap_servers, _kafka_cluster(settings).up, KafkaClusterAlreadyRunning)
    if nodes is not None:
        pids = ", ".join(f"node-{n} {state.pid}" for n, state in nodes.items())
        console.print(f"[green]Kafka cluster is up[/] on {settings.kafka.bootstrap_servers} (pids: {pids})")


def _postgres_up(settings: EspSettings) -> None:
    from orchestration.stack.postgres import DAGSTER_DB, PostgresAlreadyRunning, postgres_server

    server = postgres_server(settings)
    state = _start("PostgreSQL", server.address, server.up, PostgresAlreadyRunning)
    if state is not None:
        console.print(f"[green]PostgreSQL is up[/] on {state.address} (pid {state.pid}), database {DAGSTER_DB}")


def _start(what: str, address: str, start: Callable[[], _Status], already: type[Exception]) -> _Status | None:
    """Run a component's `up` under a spinner; None (said in yellow) when it was already running."""
    try:
        with console.status(f"starting {what} on {address}…"):
            return start()
    except already as running:
        console.print(f"[yellow]{running}[/]")
        return None


def _postgres_in_use(settings: EspSettings, server: PostgresServer) -> bool:
    """Dagster's storage is PostgreSQL, or was: a cluster esp created is stopped and shown either way."""
    return settings.dagster_storage == "postgres" or server.paths.initialised


@infra_app.command("down")
def down(config: ConfigOption = None, profile: ProfileOption = None) -> None:
    """Stop the Spark cluster and the Kafka broker (or cluster) esp started (by pid), then Dagster's
    PostgreSQL (its data stays) and the object store (in memory: emptied)."""
    from orchestration.stack.postgres import postgres_server
    from orchestration.stack.project import kafka_broker, load_settings

    with friendly_errors():
        settings = load_settings(config, _profile(profile))
        spark_cluster = _spark_cluster(settings)
        if _spark_cluster_in_use(settings, spark_cluster):
            daemons = spark_cluster.down()
            console.print(
                f"[green]Spark cluster stopped[/] ({', '.join(daemons)})"
                if daemons
                else "Spark cluster was not running"
            )
        if settings.kafka.nodes > 1:
            nodes = _kafka_cluster(settings).down()
            names = ", ".join(f"node-{n}" for n in nodes)
            console.print(f"[green]Kafka cluster stopped[/] ({names})" if nodes else "Kafka cluster was not running")
        else:
            stopped = kafka_broker(settings).down()
            console.print("[green]Kafka stopped[/]" if stopped else "Kafka was not running")
        server = postgres_server(settings)
        if _postgres_in_use(settings, server):
            console.print("[green]PostgreSQL stopped[/]" if server.down() else "PostgreSQL was not running")
        store = _object_store(settings)
        if _object_store_in_use(settings, store):
            console.print("[green]Object store stopped[/]" if store.down() else "Object store was not running")


@infra_app.command("status")
def status(config: ConfigOption = None, profile: ProfileOption = None) -> None:
    """Report whether the broker or each cluster node (and Dagster's PostgreSQL, the object store,
    the Spark master and each worker) run and answer; exit code 3 when one is down."""
    from orchestration.stack.postgres import postgres_server
    from orchestration.stack.project import kafka_broker, load_settings

    with friendly_errors():
        settings = load_settings(config, _profile(profile))
        kafka: dict[str, BrokerStatus]
        if settings.kafka.nodes > 1:
            kafka = {f"kafka node-{n}": state for n, state in _kafka_cluster(settings).status().items()}
        else:
            kafka = {"kafka": kafka_broker(settings).status()}
        server = postgres_server(settings)
        database = server.status() if _postgres_in_use(settings, server) else None
        store = _object_store(settings)
        stored = store.status() if _object_store_in_use(settings, store) else None
        spark_cluster = _spark_cluster(settings)
        spark: dict[str, DaemonStatus] = {}
        if _spark_cluster_in_use(settings, spark_cluster):
            spark = {f"spark {name}": state for name, state in spark_cluster.status().items()}
    table = Table("component", "state", "pid", "address", "note")
    for name, state in kafka.items():
        pid = str(state.pid or "-")
        table.add_row(name, _label(state.running, state.answering), pid, state.bootstrap_servers, state.note)
    if database is not None:
        pid = str(database.pid or "-")
        table.add_row("postgres", _label(database.running, database.answering), pid, database.address, database.note)
    if stored is not None:
        table.add_row(
            "object store",
            _label(stored.running, stored.answering),
            str(stored.pid or "-"),
            stored.address,
            stored.note,
        )
    for name, daemon in spark.items():
        table.add_row(
            name, _label(daemon.running, daemon.answering), str(daemon.pid or "-"), daemon.address, daemon.note
        )
    console.print(table)
    kafka_down = not all(state.running for state in kafka.values())
    spark_down = settings.spark_cluster.enabled and not all(daemon.running for daemon in spark.values())
    postgres_down = settings.dagster_storage == "postgres" and not (database and database.running)
    store_down = settings.object_store.server.enabled and not (stored and stored.running)
    if kafka_down or spark_down or postgres_down or store_down:
        raise typer.Exit(code=3)


def _label(running: bool, answering: bool) -> str:
    if running:
        return "[green]running[/]" if answering else "[yellow]not answering[/]"
    return "[red]stopped[/]"


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
    from orchestration.stack.postgres import postgres_server
    from orchestration.stack.project import load_settings

    with friendly_errors():
        settings = load_settings(config)
        if settings.dagster_storage == "postgres":
            postgres_server(settings).require_running()
        ensure_port_free(host, port)
        home = prepare_dagster_home(settings)
    console.print(f"Dagster UI: [bold]http://{host}:{port}[/]  (DAGSTER_HOME={home})")
    workspace = settings.project_root / "workspace.yaml"
    command = ["dagster", "dev", "-w", str(workspace), "-h", host, "-p", str(port)]
    raise typer.Exit(subprocess.call(command, cwd=settings.project_root, env=dagster_env(settings, os.environ)))
