"""Start, stop and inspect the local single-node Kafka broker (KRaft, broker+controller).

The broker's data, logs, rendered config and pid file live under `<run_dir>/kafka`. It is
stopped by the pid it was started with, never by process name, so a second esp checkout or an
unrelated Kafka on the machine is never touched.
"""

from __future__ import annotations

import base64
import signal
import socket
import string
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

from orchestration.stack.errors import BrokerNotAnsweringError, PortTakenError, StackError
from orchestration.stack.jvm import JvmLayout, classpath, require_tool
from orchestration.stack.kafka_listeners import listener_ports, listener_properties
from orchestration.stack.log_files import rotate
from pipelines.settings import KafkaConnection, KafkaSettings, kafka_connection

BROKER_MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"


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


class KafkaBroker:
    """One local broker: settings + where its files live + where its jars are."""

    def __init__(self, settings: KafkaSettings, run_dir: Path, jvm: JvmLayout) -> None:
        self.settings = settings
        self.paths = BrokerPaths(run_dir / "kafka")
        self.jvm = jvm

    # -- queries -----------------------------------------------------------------------------

    def running_pid(self) -> int | None:
        """The pid of our broker if the pid file names a live broker process of ours."""
        pid = _read_pid(self.paths.pid_file)
        if pid is None:
            return None
        return pid if _is_our_broker(pid, self.paths.config_file) else None

    def status(self) -> BrokerStatus:
        pid = self.running_pid()
        note = ""
        if pid is None and self.paths.pid_file.exists():
            note = f"stale pid file {self.paths.pid_file} (no broker of ours has that pid)"
        answering = pid is not None and broker_answers(self.settings.connection)
        return BrokerStatus(pid is not None, pid, self.settings.bootstrap_servers, answering, note)

    # -- lifecycle ---------------------------------------------------------------------------

    def up(self) -> BrokerStatus:
        """Start the broker (formatting storage the first time) and wait until it answers."""
        if (pid := self.running_pid()) is not None:
            raise BrokerAlreadyRunning(f"Kafka is already running (pid {pid}) on {self.settings.bootstrap_servers}")
        self._clear_stale_pid_file()
        for port in listener_ports(self.settings):
            ensure_port_free(self.settings.host, port)
        java = require_tool("java", "a Java 17+ JDK")
        self._render_config()
        if not self.paths.formatted_marker.exists():
            self._format_storage(java)
        process = self._spawn(java)
        self.paths.pid_file.write_text(str(process.pid))
        self._wait_until_answering(process)
        return self.status()

    def down(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker by its pid (SIGTERM, then SIGKILL after timeout); False if none ran."""
        pid = self.running_pid()
        if pid is None:
            self._clear_stale_pid_file()
            return False
        process = psutil.Process(pid)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except psutil.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        self.paths.pid_file.unlink(missing_ok=True)
        return True

    # -- steps -------------------------------------------------------------------------------

    def _clear_stale_pid_file(self) -> None:
        if self.paths.pid_file.exists() and self.running_pid() is None:
            self.paths.pid_file.unlink()

    def _render_config(self) -> None:
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
            **listener_properties(self.settings),
        )
        # It may hold SASL passwords: readable by its owner only, from the first byte.
        self.paths.config_file.touch(mode=0o600)
        self.paths.config_file.chmod(0o600)
        self.paths.config_file.write_text(rendered)

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

    def _format_storage(self, java: str) -> None:
        cluster_id = new_cluster_id()
        command = self._java_command(
            java, STORAGE_TOOL_CLASS, "format", "-t", cluster_id, "-c", str(self.paths.config_file), "--standalone"
        )
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{result.stdout}{result.stderr}")

    def _spawn(self, java: str) -> subprocess.Popen:
        command = self._java_command(java, BROKER_MAIN_CLASS, str(self.paths.config_file))
        # One file per start (the previous ones rotated to console.log.1..N): never appended forever.
        rotate(self.paths.console_log)
        with open(self.paths.console_log, "wb") as console:
            # A new session, so the broker outlives the CLI and a Ctrl-C in the shell.
            return subprocess.Popen(
                command, stdout=console, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    def _wait_until_answering(self, process: subprocess.Popen) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self.paths.pid_file.unlink(missing_ok=True)
                raise StackError(
                    f"Kafka exited with code {process.returncode} while starting; see {self.paths.console_log} "
                    f"and {self.paths.logs_dir / 'server.log'}"
                )
            if broker_answers(self.settings.connection):
                return
            time.sleep(0.5)
        raise BrokerNotAnsweringError(
            f"Kafka (pid {process.pid}) did not answer on {self.settings.bootstrap_servers} within "
            f"{self.settings.start_timeout_s:.0f}s; see {self.paths.logs_dir / 'server.log'}"
        )


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
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(
            **kafka_connection(kafka).client_kwargs(),
            request_timeout_ms=int(timeout_s * 1000),
            bootstrap_timeout_ms=int(timeout_s * 1000),
        )
    except (KafkaError, OSError, ValueError):
        return False
    try:
        admin.list_topics()
        return True
    except (KafkaError, OSError):
        return False
    finally:
        admin.close()


def _read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _is_our_broker(pid: int, config_file: Path) -> bool:
    try:
        cmdline = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return BROKER_MAIN_CLASS in cmdline and str(config_file) in cmdline
