"""Start, stop and inspect esp's Spark standalone cluster (`spark_cluster.enabled`): a master and
`spark_cluster.workers` workers on `spark_cluster.host` (127.0.0.1), run by the installed PySpark's
own `spark-class`, so the cluster is the very Spark version the driver is.

Each daemon has a folder under `<run_dir>/spark-cluster/` (`master/`, `worker-<n>/`) holding its
properties file (`spark.properties`, passed with `--properties-file`: how a pid is recognised as
ours), its pid file, its console log (one per start, older starts rotated as the broker's are) and,
for a worker, its work folder (`work/`: each application's jars and executor logs; the logs roll
by size, a stopped application's folder is deleted a day after it ends) and its executors' scratch
space (`local/`, emptied as each application ends), rather than /tmp. Every daemon binds and advertises
`host` only: its RPC port via `--host`, its web UI via SPARK_LOCAL_IP (Spark has no conf for the UI's
address). Worker n listens on the master's port + n, its UI on the master UI's port + n. The web
UIs are read-only (no kill links) and the master's REST submission server is off.

The master's JSON state (`<web UI>/json/`) is what `up` waits on (every worker registered ALIVE)
and what `status` reports; a worker's own (`<its UI>/json/`) lists the executors it runs. A daemon
is stopped by the pid it was started with, never by process name, and a worker's executors (with
their Python workers) are killed with it if they outlive it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from orchestration.stack.daemons import pid_from_file, spawn_detached, stop_process
from orchestration.stack.errors import PortTakenError, StackError, ToolMissingError
from orchestration.stack.kafka_broker import ensure_port_free
from pipelines.settings import SparkClusterSettings

CLUSTER_FOLDER = "spark-cluster"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

DAEMON_PROPERTIES = {
    # Read-only web UIs, as the driver's: no link kills an application or a driver.
    "spark.ui.killEnabled": "false",
}
MASTER_PROPERTIES = {
    # The REST submission server would accept any driver from anyone who reaches its port.
    "spark.master.rest.enabled": "false",
}
WORKER_PROPERTIES = {
    # Executor logs roll at 10 MB, 3 kept; a stopped application's folder (its copies of the jars)
    # is deleted a day after it ends: the work folder stays bounded.
    "spark.executor.logs.rolling.strategy": "size",
    "spark.executor.logs.rolling.maxSize": str(10 * 1024 * 1024),
    "spark.executor.logs.rolling.maxRetainedFiles": "3",
    "spark.worker.cleanup.enabled": "true",
    "spark.worker.cleanup.appDataTtl": str(24 * 3600),
}


def pyspark_home() -> Path:
    """The installed PySpark's package folder: its `bin/spark-class` and `jars/` are a Spark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ToolMissingError("PySpark is not installed in this Python; run `make install`")
    return Path(spec.origin).parent


def spark_class(home: Path) -> Path:
    """The `spark-class` launcher of the Spark in `home`."""
    launcher = home / "bin" / "spark-class"
    if not os.access(launcher, os.X_OK):
        raise ToolMissingError(f"{launcher} is missing or not executable; reinstall PySpark (`make install`)")
    return launcher


@dataclass(frozen=True)
class DaemonPaths:
    """Files of one daemon under `<run_dir>/spark-cluster/<name>`."""

    root: Path

    @property
    def properties_file(self) -> Path:
        return self.root / "spark.properties"

    @property
    def pid_file(self) -> Path:
        return self.root / "daemon.pid"

    @property
    def console_log(self) -> Path:
        return self.root / "console.log"

    @property
    def work_dir(self) -> Path:
        return self.root / "work"

    @property
    def local_dir(self) -> Path:
        """A worker's scratch space (spark.local.dir): its executors' shuffle and spill files."""
        return self.root / "local"


@dataclass(frozen=True)
class DaemonStatus:
    """What `esp infra status` reports about the master or one worker."""

    running: bool
    pid: int | None
    address: str
    answering: bool
    note: str = ""


@dataclass(frozen=True)
class SparkDaemon:
    """One process of the cluster: the master or worker n."""

    name: str
    main_class: str
    arguments: tuple[str, ...]
    properties: dict[str, str]
    paths: DaemonPaths
    ports: tuple[int, ...]
    address: str

    def command(self, launcher: Path) -> list[str]:
        return [str(launcher), self.main_class, *self.arguments, "--properties-file", str(self.paths.properties_file)]

    def running_pid(self) -> int | None:
        """The pid of our daemon if the pid file names a live process started with our properties file."""
        properties = str(self.paths.properties_file)
        return pid_from_file(self.paths.pid_file, lambda cmdline: self.main_class in cmdline and properties in cmdline)

    def stale_note(self) -> str:
        if self.paths.pid_file.exists():
            return f"stale pid file {self.paths.pid_file} (no daemon of ours has that pid)"
        return ""

    def render_properties(self) -> None:
        self.paths.root.mkdir(parents=True, exist_ok=True)
        lines = [f"{key} {value}" for key, value in sorted(self.properties.items())]
        self.paths.properties_file.write_text("\n".join(["# written by esp at every start", *lines, ""]))

    def spawn(self, launcher: Path, environment: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start the daemon (spark-class execs its JVM: the pid stays the daemon's) and write its pid file."""
        self.render_properties()
        if self.main_class == WORKER_CLASS:
            self.paths.work_dir.mkdir(exist_ok=True)
        return spawn_detached(
            self.command(launcher), self.paths.console_log, self.paths.pid_file, env=environment, cwd=self.paths.root
        )


class SparkCluster:
    """esp's Spark standalone cluster: its master and workers, from the settings and the run folder."""

    def __init__(self, settings: SparkClusterSettings, run_dir: Path) -> None:
        self.settings = settings
        self.root = run_dir / CLUSTER_FOLDER
        host = settings.host
        self.master = SparkDaemon(
            "Spark master",
            MASTER_CLASS,
            ("--host", host, "--port", str(settings.master_port), "--webui-port", str(settings.webui_port)),
            {**DAEMON_PROPERTIES, **MASTER_PROPERTIES},
            DaemonPaths(self.root / "master"),
            (settings.master_port, settings.webui_port),
            settings.master_url,
        )
        self.workers = {n: self._worker(n) for n in settings.worker_ids}

    def _worker(self, n: int) -> SparkDaemon:
        settings = self.settings
        port, webui_port = settings.master_port + n, settings.webui_port + n
        paths = DaemonPaths(self.root / f"worker-{n}")
        arguments = (
            settings.master_url,
            "--host",
            settings.host,
            "--port",
            str(port),
            "--webui-port",
            str(webui_port),
            "--cores",
            str(settings.cores_per_worker),
            "--memory",
            settings.memory_per_worker,
            "--work-dir",
            str(paths.work_dir),
        )
        properties = {**DAEMON_PROPERTIES, **WORKER_PROPERTIES, "spark.local.dir": str(paths.local_dir)}
        return SparkDaemon(
            f"Spark worker-{n}",
            WORKER_CLASS,
            arguments,
            properties,
            paths,
            (port, webui_port),
            f"{settings.host}:{port}",
        )

    @property
    def daemons(self) -> dict[str, SparkDaemon]:
        """By component name: `master`, then `worker-<n>`."""
        return {"master": self.master, **{f"worker-{n}": worker for n, worker in self.workers.items()}}

    def environment(self, base: dict[str, str], home: Path) -> dict[str, str]:
        """The daemons' environment: `base` with the Spark they run and the address they bind and show."""
        return {
            **base,
            "SPARK_HOME": str(home),  # not another Spark the user's environment names
            "SPARK_LOCAL_IP": self.settings.host,  # the web UIs bind it (every interface without it)
            "SPARK_PUBLIC_DNS": self.settings.host,  # the UI addresses the master and workers advertise
            "SPARK_DAEMON_MEMORY": self.settings.daemon_heap,
        }

    # -- queries -----------------------------------------------------------------------------

    def master_state(self, timeout_s: float = 3.0) -> dict[str, Any] | None:
        """The master's JSON state (workers, applications), or None when it does not answer."""
        return _get_json(f"{self.settings.webui_url}/json/", timeout_s)

    def registered_workers(self, state: dict[str, Any] | None = None) -> set[int]:
        """Our workers the master lists ALIVE (by worker number)."""
        state = self.master_state() if state is None else state
        if state is None:
            return set()
        alive = {(w["host"], w["port"]) for w in state.get("workers", []) if w.get("state") == "ALIVE"}
        return {n for n in self.workers if (self.settings.host, self.settings.master_port + n) in alive}

    def status(self) -> dict[str, DaemonStatus]:
        """The master's and each worker's status, by component name; the master's note counts the
        workers it lists ALIVE."""
        master_pid = self.master.running_pid()
        state = self.master_state() if master_pid is not None else None
        registered = self.registered_workers(state)
        alive = f"{len(registered)}/{len(self.workers)} workers alive, UI :{self.settings.webui_port}"
        statuses = {
            "master": _status(self.master, master_pid, state is not None and state.get("status") == "ALIVE", alive)
        }
        for n, worker in self.workers.items():
            pid = worker.running_pid()
            note = "" if pid is None or n in registered else "not registered with the master"
            statuses[f"worker-{n}"] = _status(worker, pid, pid is not None and n in registered, note)
        return statuses

    def executors_per_worker(self, app_id: str) -> dict[str, int]:
        """How many executors of application `app_id` each ALIVE worker runs or ran, by worker id:
        from each worker's JSON state, at the UI address the master's JSON gives."""
        state = self.master_state() or {}
        counts = {}
        for worker in state.get("workers", []):
            if worker.get("state") != "ALIVE":
                continue
            own = _get_json(f"{worker['webuiaddress']}/json/", 3.0) or {}
            executors = [*own.get("executors", []), *own.get("finishedexecutors", [])]
            counts[worker["id"]] = sum(executor.get("appid") == app_id for executor in executors)
        return counts

    # -- lifecycle ---------------------------------------------------------------------------

    def up(self) -> dict[str, DaemonStatus]:
        """Start the master and every worker that is not running, then wait until the master lists
        every worker ALIVE."""
        stopped = {name: daemon for name, daemon in self.daemons.items() if daemon.running_pid() is None}
        if not stopped:
            pids = ", ".join(str(daemon.running_pid()) for daemon in self.daemons.values())
            raise SparkClusterAlreadyRunning(
                f"the Spark cluster is already running (pids {pids}) on {self.settings.master_url}"
            )
        for daemon in stopped.values():
            daemon.paths.pid_file.unlink(missing_ok=True)
            for port in daemon.ports:
                try:
                    ensure_port_free(self.settings.host, port)
                except PortTakenError:
                    raise PortTakenError(
                        f"port {port} on {self.settings.host} ({daemon.name}) is taken by another process; stop it "
                        "or choose other spark_cluster.master_port / webui_port"
                    ) from None
        home = pyspark_home()
        launcher = spark_class(home)
        environment = self.environment(dict(os.environ), home)
        # The master first: workers retry their registration, but a master that is up takes them at once.
        started = {name: daemon.spawn(launcher, environment) for name, daemon in stopped.items()}
        self._wait_for_workers(started)
        return self.status()

    def down(self, timeout_s: float = 30.0) -> list[str]:
        """Stop every running daemon by its pid, workers first (SIGTERM, SIGKILL after timeout),
        then whatever a worker started that outlived it; the names of those that ran."""
        stopped = []
        for name, daemon in reversed(self.daemons.items()):
            pid = daemon.running_pid()
            if pid is None:
                daemon.paths.pid_file.unlink(missing_ok=True)
                continue
            try:
                started_by_it = psutil.Process(pid).children(recursive=True)  # executors, their Python workers
            except psutil.NoSuchProcess:
                started_by_it = []
            stop_process(pid, timeout_s, started_by_it)
            daemon.paths.pid_file.unlink(missing_ok=True)
            stopped.append(name)
        return stopped[::-1]

    # -- steps -------------------------------------------------------------------------------

    def _wait_for_workers(self, started: dict[str, subprocess.Popen[bytes]]) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        while len(self.registered_workers()) < len(self.workers):
            for name, process in started.items():
                if process.poll() is not None:
                    daemon = self.daemons[name]
                    daemon.paths.pid_file.unlink(missing_ok=True)
                    raise StackError(
                        f"{daemon.name} exited with code {process.returncode} while starting:\n"
                        f"{_tail(daemon.paths.console_log)}"
                    )
            if time.monotonic() > deadline:
                registered = len(self.registered_workers())
                raise StackError(
                    f"the Spark master at {self.settings.webui_url} lists {registered} of {len(self.workers)} "
                    f"workers alive after {self.settings.start_timeout_s:.0f}s; see {self.root}/*/console.log"
                )
            time.sleep(0.5)


class SparkClusterAlreadyRunning(StackError):
    """`up` was asked while the master and every worker of our cluster run."""


def _status(daemon: SparkDaemon, pid: int | None, answering: bool, note: str) -> DaemonStatus:
    stale = daemon.stale_note() if pid is None else ""
    return DaemonStatus(pid is not None, pid, daemon.address, answering, note if pid is not None else stale)


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""The daemons are on this machine: an HTTP proxy of the environment must not be asked for them."""


def _get_json(url: str, timeout_s: float) -> dict[str, Any] | None:
    try:
        with _DIRECT.open(url, timeout=timeout_s) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def _tail(path: Path, lines: int = 15) -> str:
    try:
        tail = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        tail = []
    return "\n".join([*tail, f"see {path}"])
