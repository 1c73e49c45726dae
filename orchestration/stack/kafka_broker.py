"""Start, stop and inspect a local Kafka node (KRaft, broker+controller): the single broker, or one
node of the local cluster (`orchestration/stack/kafka_cluster.py`).

The single broker's data, logs, rendered config and pid file live under `<run_dir>/kafka`, a
cluster node's under `<run_dir>/kafka-cluster/node-<id>`. A node is stopped by the pid it was
started with, never by process name, so a second esp checkout or an unrelated Kafka on the
machine is never touched.
"""

from __future__ import annotations

import base64
import signal
import socket
import string
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil

from orchestration.stack.daemons import pid_from_file, spawn_detached
from orchestration.stack.errors import BrokerNotAnsweringError, PortTakenError, StackError
from orchestration.stack.jvm import JvmLayout, classpath, require_tool
from orchestration.stack.kafka_listeners import listener_ports, listener_properties
from pipelines.settings import KafkaConnection, KafkaSettings, kafka_connection

BROKER_MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"

T = TypeVar("T")


@dataclass(frozen=True)
class BrokerPaths:
    """Files of one broker instance under the run folder."""

    root: Path

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def config_file(self) -> Path:
        return self.root / "server.properties"

    @property
    def pid_file(self) -> Path:
        return self.root / "broker.pid"

    @property
    def console_log(self) -> Path:
        return self.logs_dir / "console.log"

    @property
    def formatted_marker(self) -> Path:
        return self.data_dir / "meta.properties"


@dataclass(frozen=True)
class BrokerStatus:
    """What `esp infra status` reports about the broker."""

    running: bool
    pid: int | None
    bootstrap_servers: str
    answering: bool
    note: str = ""


@dataclass(frozen=True)
class NodeRole:
    """What sets one node apart in its KRaft quorum: its id, the quorum's controllers, the replication
    of the topics it creates, and whether it formats itself as a one-node quorum."""

    name: str
    node_id: int
    quorum_bootstrap_servers: str
    replication_factor: int
    min_insync_replicas: int
    standalone: bool

    @classmethod
    def single(cls, settings: KafkaSettings) -> NodeRole:
        """The single broker: node 1, its own controller the whole quorum."""
        return cls(
            "Kafka",
            1,
            f"{settings.host}:{settings.controller_port}",
            settings.replication_factor,
            settings.min_insync_replicas,
            standalone=True,
        )


class KafkaNode:
    """One local Kafka process: its own settings (ports) + its role + where its files and jars are."""

    def __init__(self, settings: KafkaSettings, root: Path, jvm: JvmLayout, role: NodeRole) -> None:
        self.settings = settings
        self.paths = BrokerPaths(root)
        self.jvm = jvm
        self.role = role

    # -- queries -----------------------------------------------------------------------------

    def running_pid(self) -> int | None:
        """The pid of our broker if the pid file names a live broker process of ours."""
        config = str(self.paths.config_file)
        return pid_from_file(self.paths.pid_file, lambda cmdline: BROKER_MAIN_CLASS in cmdline and config in cmdline)

    def status(self) -> BrokerStatus:
        pid = self.running_pid()
        note = ""
        if pid is None and self.paths.pid_file.exists():
            note = f"stale pid file {self.paths.pid_file} (no broker of ours has that pid)"
        answering = pid is not None and broker_answers(self.settings.connection)
        return BrokerStatus(pid is not None, pid, self.settings.bootstrap_servers, answering, note)

    # -- lifecycle ---------------------------------------------------------------------------

    def up(self) -> BrokerStatus:
        """Start the node (a single broker formats its storage the first time) and wait until it answers."""
        java = self.prepare()
        if not self.paths.formatted_marker.exists():
            if not self.role.standalone:
                raise StackError(f"{self.role.name}'s storage {self.paths.data_dir} is not formatted")
            self.format_storage(java, new_cluster_id(), "--standalone")
        process = self.start(java)
        self.wait_until_answering(process)
        return self.status()

    def down(self, timeout_s: float = 30.0) -> bool:
        """Stop the node by its pid (SIGTERM, then SIGKILL after timeout); False if none ran."""
        process = self.terminate()
        if process is None:
            return False
        self.reap(process, timeout_s)
        return True

    # -- steps -------------------------------------------------------------------------------

    def prepare(self) -> str:
        """Check it can start (not running, ports free, java), render its config; returns java."""
        if (pid := self.running_pid()) is not None:
            raise BrokerAlreadyRunning(
                f"{self.role.name} is already running (pid {pid}) on {self.settings.bootstrap_servers}"
            )
        self._clear_stale_pid_file()
        for port in listener_ports(self.settings):
            ensure_port_free(self.settings.host, port)
        java = require_tool("java", "a Java 17+ JDK")
        self.render_config()
        return java

    def render_config(self) -> None:
        template_path = self.jvm.project_root / "infra" / "kafka" / "server.properties.template"
        template = string.Template(template_path.read_text())
        self.paths.data_dir.mkdir(parents=True, exist_ok=True)
        self.paths.logs_dir.mkdir(parents=True, exist_ok=True)
        rendered = template.substitute(
            host=self.settings.host,
            client_port=self.settings.client_port,
            controller_port=self.settings.controller_port,
            data_dir=self.paths.data_dir,
            default_partitions=self.settings.default_partitions,
            node_id=self.role.node_id,
            quorum_bootstrap_servers=self.role.quorum_bootstrap_servers,
            replication_factor=self.role.replication_factor,
            min_insync_replicas=self.role.min_insync_replicas,
            **listener_properties(self.settings),
        )
        # It may hold SASL passwords: readable by its owner only, from the first byte.
        self.paths.config_file.touch(mode=0o600)
        self.paths.config_file.chmod(0o600)
        self.paths.config_file.write_text(rendered)

    def format_storage(self, java: str, cluster_id: str, *quorum_options: str) -> None:
        """Format the data folder for `cluster_id`: `--standalone`, or `--initial-controllers …`."""
        command = self._java_command(
            java, STORAGE_TOOL_CLASS, "format", "-t", cluster_id, "-c", str(self.paths.config_file), *quorum_options
        )
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{result.stdout}{result.stderr}")

    def start(self, java: str) -> subprocess.Popen:
        """Spawn the node and write its pid file (not waiting for it to answer)."""
        command = self._java_command(java, BROKER_MAIN_CLASS, str(self.paths.config_file))
        return spawn_detached(command, self.paths.console_log, self.paths.pid_file)

    def wait_until_answering(self, process: subprocess.Popen) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self.paths.pid_file.unlink(missing_ok=True)
                raise StackError(
                    f"{self.role.name} exited with code {process.returncode} while starting; see "
                    f"{self.paths.console_log} and {self.paths.logs_dir / 'server.log'}"
                )
            if broker_answers(self.settings.connection):
                return
            time.sleep(0.5)
        raise BrokerNotAnsweringError(
            f"{self.role.name} (pid {process.pid}) did not answer on {self.settings.bootstrap_servers} within "
            f"{self.settings.start_timeout_s:.0f}s; see {self.paths.logs_dir / 'server.log'}"
        )

    def terminate(self) -> psutil.Process | None:
        """Send our running node SIGTERM; None (a stale pid file cleared) when none runs."""
        pid = self.running_pid()
        if pid is None:
            self._clear_stale_pid_file()
            return None
        process = psutil.Process(pid)
        process.send_signal(signal.SIGTERM)
        return process

    def reap(self, process: psutil.Process, timeout_s: float) -> None:
        """Wait for a terminated node to exit (SIGKILL after timeout), then drop its pid file."""
        try:
            process.wait(timeout=timeout_s)
        except psutil.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        self.paths.pid_file.unlink(missing_ok=True)

    def _clear_stale_pid_file(self) -> None:
        if self.paths.pid_file.exists() and self.running_pid() is None:
            self.paths.pid_file.unlink()

    def _java_command(self, java: str, main_class: str, *args: str) -> list[str]:
        log4j = self.jvm.project_root / "infra" / "kafka" / "log4j2.yaml"
        return [
            java,
            f"-Xmx{self.settings.heap}",
            f"-Xms{self.settings.heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={self.paths.logs_dir}",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            classpath(self.jvm, "kafka"),
            main_class,
            *args,
        ]


class KafkaBroker(KafkaNode):
    """The single local broker (`kafka.nodes: 1`): node 1 and its own one-node quorum, under `<run_dir>/kafka`."""

    def __init__(self, settings: KafkaSettings, run_dir: Path, jvm: JvmLayout) -> None:
        super().__init__(settings, run_dir / "kafka", jvm, NodeRole.single(settings))


class BrokerAlreadyRunning(StackError):
    """`up` was asked while our broker already runs."""


def new_cluster_id(random_uuid=uuid.uuid4) -> str:
    """A Kafka cluster id: a random UUID in URL-safe base64 without padding (22 chars).

    Like Kafka's own `Uuid.randomUuid`, it never starts with '-': the storage tool's
    argument parser would take such an id for an option (1 draw in 64 does).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(random_uuid().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def ensure_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As the broker binds: connections of a killed broker left in TIME_WAIT do not hold the
        # port (without this, a restart within a minute of a crash was refused).
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            raise PortTakenError(
                f"port {port} on {host} is taken by another process; stop it or choose another port "
                f"(kafka.client_port / kafka.controller_port)"
            ) from err


def broker_answers(kafka: KafkaConnection | str, timeout_s: float = 3.0) -> bool:
    """True when the broker answers a metadata request (authenticated as `kafka` says)."""
    return ask_brokers(kafka, lambda admin: admin.list_topics(), timeout_s) is not None


def ask_brokers(kafka: KafkaConnection | str, question: Callable[[Any], T], timeout_s: float = 3.0) -> T | None:
    """`question(admin)` on a short-lived kafka-python admin client; None when no broker answers."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(
            **kafka_connection(kafka).client_kwargs(),
            request_timeout_ms=int(timeout_s * 1000),
            bootstrap_timeout_ms=int(timeout_s * 1000),
        )
    except (KafkaError, OSError, ValueError):
        return None
    try:
        return question(admin)
    except (KafkaError, OSError):
        return None
    finally:
        admin.close()
