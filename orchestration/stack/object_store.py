"""Start, stop and inspect the cluster profile's S3-compatible object store
(`object_store.server.enabled`): moto's server, from PyPI, on `object_store.server.host` (127.0.0.1),
with the streams' bucket created at each start.

Its folder is `<run_dir>/object-store/` (pid file, console log rotated per start). The server keeps
objects in memory while it runs: stopping it empties the store (the settings say so; a durable store
is any other S3-compatible endpoint in `object_store.endpoint_url`). It is stopped by the pid it was
started with, never by process name.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from orchestration.stack.daemons import pid_from_file, spawn_detached, stop_process
from orchestration.stack.errors import PortTakenError, StackError, ToolMissingError
from orchestration.stack.kafka_broker import ensure_port_free
from pipelines.settings import ObjectStoreServerSettings

STORE_FOLDER = "object-store"
SERVER_PROGRAM = "moto_server"


def server_program() -> Path:
    """moto's server launcher installed beside this Python (the project's venv)."""
    found = shutil.which(SERVER_PROGRAM, path=str(Path(sys.executable).parent))
    if found is None:
        raise ToolMissingError(
            f"{SERVER_PROGRAM} is missing beside {sys.executable}: run `make install` (moto[server])"
        )
    return Path(found)


@dataclass(frozen=True)
class ObjectStoreStatus:
    """What `esp infra status` reports about the object store."""

    running: bool
    pid: int | None
    address: str
    answering: bool
    note: str = ""


class ObjectStoreAlreadyRunning(StackError):
    """`up` was asked while our object store runs."""


class ObjectStoreServer:
    """esp's local S3-compatible server, from the settings and the run folder."""

    def __init__(self, settings: ObjectStoreServerSettings, run_dir: Path) -> None:
        self.settings = settings
        self.root = run_dir / STORE_FOLDER
        self.pid_file = self.root / "server.pid"
        self.console_log = self.root / "console.log"

    @property
    def address(self) -> str:
        return self.settings.endpoint_url

    def command(self) -> list[str]:
        return [str(server_program()), "-H", self.settings.host, "-p", str(self.settings.port)]

    def running_pid(self) -> int | None:
        """The pid in our pid file if it is a live moto server on our port."""
        port = str(self.settings.port)
        return pid_from_file(
            self.pid_file, lambda cmdline: any(p.endswith(SERVER_PROGRAM) for p in cmdline) and port in cmdline
        )

    def answering(self, timeout_s: float = 2.0) -> bool:
        try:
            with _DIRECT.open(self.address, timeout=timeout_s):
                return True
        except OSError:
            return False

    def status(self) -> ObjectStoreStatus:
        pid = self.running_pid()
        if pid is None:
            note = f"stale pid file {self.pid_file}" if self.pid_file.exists() else ""
            return ObjectStoreStatus(False, None, self.address, False, note)
        answering = self.answering()
        return ObjectStoreStatus(True, pid, self.address, answering, f"bucket {self.settings.bucket}")

    def up(self, timeout_s: float = 60.0) -> ObjectStoreStatus:
        """Start the server, wait until it answers, create the streams' bucket."""
        if (pid := self.running_pid()) is not None:
            raise ObjectStoreAlreadyRunning(f"the object store is already running (pid {pid}) on {self.address}")
        try:
            ensure_port_free(self.settings.host, self.settings.port)
        except PortTakenError:
            raise PortTakenError(
                f"port {self.settings.port} on {self.settings.host} is taken by another process; stop it or choose "
                "another object_store.server.port"
            ) from None
        self.root.mkdir(parents=True, exist_ok=True)
        process = spawn_detached(self.command(), self.console_log, self.pid_file)
        self._wait_answering(process, timeout_s)
        self.create_bucket()
        return self.status()

    def create_bucket(self) -> None:
        """The streams' bucket (an existing one is kept)."""
        import pyarrow.fs as pafs

        store = pafs.S3FileSystem(
            endpoint_override=self.address,
            access_key=self.settings.access_key_id,
            secret_key=self.settings.secret_access_key.get_secret_value(),
            region="us-east-1",
            allow_bucket_creation=True,
        )
        store.create_dir(self.settings.bucket)

    def down(self, timeout_s: float = 15.0) -> bool:
        """Stop the server by its pid (SIGTERM, SIGKILL after `timeout_s`); whether it ran."""
        pid = self.running_pid()
        self.pid_file.unlink(missing_ok=True)
        if pid is None:
            return False
        stop_process(pid, timeout_s)
        return True

    def _wait_answering(self, process: subprocess.Popen[bytes], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.answering(timeout_s=1.0):
            if process.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise StackError(f"the object store exited with code {process.returncode}; see {self.console_log}")
            if time.monotonic() > deadline:
                raise StackError(f"the object store did not answer on {self.address} in {timeout_s:.0f}s")
            time.sleep(0.2)


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""The server is on this machine: an HTTP proxy of the environment must not be asked for it."""
