"""Start, stop and inspect esp's own PostgreSQL cluster: Dagster's storage when `dagster_storage` is postgres.

The cluster lives under `<run_dir>/postgres`: the data folder `data/` (created once by initdb, kept
when the server stops) and the server's log `server.log` (one per start, older starts rotated like
the broker's). It is run by the machine's PostgreSQL server programs (initdb, pg_ctl, postgres, psql
and pg_isready from one folder, `postgres.bin_dir` or found by `find_bin_dir`), is started, stopped
and inspected with pg_ctl on its data folder (never by process name), listens on 127.0.0.1 only, on
`postgres.port`, and has no Unix socket. Connections from 127.0.0.1 are trusted (no password): any
local user may connect as its superuser `postgres`, as with the broker's PLAINTEXT listener.

initdb, pg_ctl and the server refuse to run as root. When esp runs as root, they run as
`postgres.run_as`: by default `postgres`, the unprivileged system user that Debian's PostgreSQL
packages create with the very binaries esp runs, so nothing new is added to the machine's accounts.
(`nobody` would do too, but files owned by nobody belong to every other daemon that runs as nobody.)
That user owns `<run_dir>/postgres` and must be able to reach it: the folders above it must be
traversable by others (`chmod o+x`), which a home folder like /root is not.
"""

from __future__ import annotations

import math
import os
import pwd
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from orchestration.stack.errors import PortTakenError, StackError, ToolMissingError
from orchestration.stack.kafka_broker import ensure_port_free
from orchestration.stack.log_files import rotate
from pipelines.settings import EspSettings, PostgresSettings

HOST = "127.0.0.1"
SUPERUSER = "postgres"
DAGSTER_DB = "dagster"
SERVER_PROGRAMS = ("initdb", "pg_ctl", "postgres", "psql", "pg_isready")
INSTALL_HINT = (
    "install the PostgreSQL server (Debian/Ubuntu: `apt-get install postgresql-15`) "
    "or set postgres.bin_dir to the folder holding initdb and pg_ctl"
)


@dataclass(frozen=True)
class PostgresPaths:
    """Files of esp's cluster under the run folder."""

    root: Path

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    @property
    def version_file(self) -> Path:
        """Written by initdb: the major version that created the data folder (and the marker that it exists)."""
        return self.data_dir / "PG_VERSION"

    @property
    def initialised(self) -> bool:
        return self.version_file.is_file()


@dataclass(frozen=True)
class PostgresStatus:
    """What `esp infra status` reports about the PostgreSQL server."""

    running: bool
    pid: int | None
    address: str
    answering: bool
    note: str = ""


class PostgresAlreadyRunning(StackError):
    """`up` was asked while esp's PostgreSQL server already runs."""


def find_bin_dir(
    configured: Path | None, search_root: Path = Path("/usr/lib/postgresql"), path: str | None = None
) -> Path:
    """The folder holding all of SERVER_PROGRAMS: `configured` if given, else the newest
    `<search_root>/<version>/bin`, else the folder of the `pg_ctl` on PATH (symlinks resolved)."""
    if configured is not None:
        candidates = [configured]
    else:
        candidates = sorted(search_root.glob("*/bin"), key=lambda folder: _version_key(folder.parent.name))[::-1]
        if on_path := shutil.which("pg_ctl", path=path):
            candidates.append(Path(on_path).resolve().parent)
    for folder in candidates:
        if all(os.access(folder / program, os.X_OK) for program in SERVER_PROGRAMS):
            return folder
    where = str(configured) if configured is not None else f"{search_root}/*/bin nor on PATH"
    raise ToolMissingError(f"PostgreSQL's programs ({', '.join(SERVER_PROGRAMS)}) are not in {where}; {INSTALL_HINT}")


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".")) if re.fullmatch(r"\d+(\.\d+)*", name) else (-1,)


def server_account(run_as: str, euid: int) -> pwd.struct_passwd | None:
    """The account the server's programs run as: None (esp's own) unless esp runs as root."""
    if euid != 0:
        return None
    try:
        account = pwd.getpwnam(run_as)
    except KeyError:
        raise StackError(
            f"esp runs as root, which PostgreSQL refuses, and postgres.run_as {run_as!r} is no user of this machine: "
            "install postgresql-15 (it creates the `postgres` user) or set postgres.run_as to an unprivileged user"
        ) from None
    if account.pw_uid == 0:
        raise StackError(f"postgres.run_as {run_as!r} is root; PostgreSQL needs an unprivileged user")
    return account


class PostgresServer:
    """esp's PostgreSQL cluster: settings + where its files live + who runs it."""

    def __init__(self, settings: PostgresSettings, run_dir: Path, euid: int | None = None) -> None:
        self.settings = settings
        self.paths = PostgresPaths(run_dir / "postgres")
        self.euid = os.geteuid() if euid is None else euid

    @property
    def address(self) -> str:
        return f"{HOST}:{self.settings.port}"

    @cached_property
    def bin_dir(self) -> Path:
        return find_bin_dir(self.settings.bin_dir)

    @cached_property
    def account(self) -> pwd.struct_passwd | None:
        return server_account(self.settings.run_as, self.euid)

    # -- queries -----------------------------------------------------------------------------

    def running_pid(self) -> int | None:
        """The server's pid when pg_ctl finds it running on our data folder."""
        if not self.paths.initialised:
            return None
        result = self._as_server(self._pg_ctl("status"))
        found = re.search(r"PID: (\d+)", result.stdout) if result.returncode == 0 else None
        return int(found.group(1)) if found else None

    def status(self) -> PostgresStatus:
        if not self.paths.initialised:
            return PostgresStatus(False, None, self.address, False, "no cluster yet (`esp infra up` creates it)")
        pid = self.running_pid()
        answering = pid is not None and self.accepts_connections()
        note = f"database {DAGSTER_DB}" if answering else ""
        return PostgresStatus(pid is not None, pid, self.address, answering, note)

    def accepts_connections(self) -> bool:
        command = [str(self.bin_dir / "pg_isready"), "-h", HOST, "-p", str(self.settings.port), "-t", "3"]
        return subprocess.run(command, capture_output=True).returncode == 0

    def require_running(self) -> None:
        """A StackError saying how to start the server unless it accepts connections."""
        if not (self.running_pid() is not None and self.accepts_connections()):
            raise StackError(
                f"Dagster's storage is PostgreSQL (dagster_storage: postgres) but esp's server on {self.address} "
                "is not running; start it with `esp infra up`"
            )

    # -- lifecycle ---------------------------------------------------------------------------

    def up(self) -> PostgresStatus:
        """Start the server (creating the cluster the first time) and create Dagster's database."""
        if (pid := self.running_pid()) is not None:
            raise PostgresAlreadyRunning(f"PostgreSQL is already running (pid {pid}) on {self.address}")
        try:
            ensure_port_free(HOST, self.settings.port)
        except PortTakenError:
            raise PortTakenError(
                f"port {self.settings.port} on {HOST} is taken by another process; stop it or set postgres.port"
            ) from None
        self._prepare_root()
        if self.paths.initialised:
            self._check_version()
        else:
            self._initdb()
        rotate(self.paths.log_file)
        timeout_s = math.ceil(self.settings.start_timeout_s)
        options = f"-h {HOST} -p {self.settings.port} -k ''"  # TCP on loopback only, no Unix socket
        start = self._pg_ctl("start", "-w", "-t", str(timeout_s), "-l", str(self.paths.log_file), "-o", options)
        # A new session, so the server outlives the CLI and a Ctrl-C in the shell.
        result = self._as_server(start, start_new_session=True)
        if result.returncode != 0:
            raise StackError(f"PostgreSQL did not start (pg_ctl exit {result.returncode}):\n{self._log_tail()}")
        self._create_database()
        return self.status()

    def down(self, timeout_s: float = 60.0) -> bool:
        """Stop the server (fast shutdown: open sessions are ended); the data folder stays. False if none ran."""
        if self.running_pid() is None:
            return False
        result = self._as_server(self._pg_ctl("stop", "-m", "fast", "-w", "-t", str(math.ceil(timeout_s))))
        if result.returncode != 0:
            raise StackError(f"pg_ctl could not stop PostgreSQL (exit {result.returncode}): {result.stderr.strip()}")
        return True

    # -- steps -------------------------------------------------------------------------------

    def _pg_ctl(self, *args: str) -> list[str]:
        return [str(self.bin_dir / "pg_ctl"), "-D", str(self.paths.data_dir), *args]

    def _as_server(
        self, command: list[str], start_new_session: bool = False, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command as the server's user, in its folder (the caller's may be out of its reach)."""
        account = self.account
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            cwd=cwd or self.paths.root,
            start_new_session=start_new_session,
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
        )

    def _prepare_root(self) -> None:
        root = self.paths.root
        root.mkdir(parents=True, exist_ok=True)
        if (account := self.account) is None:
            return
        os.chown(root, account.pw_uid, account.pw_gid)
        root.chmod(0o700)
        if self._as_server(["test", "-w", str(root), "-a", "-x", str(root)], cwd=Path("/")).returncode != 0:
            raise StackError(
                f"PostgreSQL runs as {account.pw_name} (esp runs as root, which it refuses), and that user "
                f"cannot reach {root}: let others traverse the folders above it (chmod o+x) or set run_dir_name "
                "to a folder outside a private home"
            )

    def _initdb(self) -> None:
        command = [str(self.bin_dir / "initdb"), "-D", str(self.paths.data_dir), "-U", SUPERUSER]
        command += ["--auth=trust", "--encoding=UTF8", "--locale=C"]
        result = self._as_server(command)
        if result.returncode != 0:
            raise StackError(f"initdb could not create the cluster in {self.paths.data_dir}:\n{result.stderr.strip()}")

    def _check_version(self) -> None:
        created_by = self.paths.version_file.read_text().strip()
        version = subprocess.run([str(self.bin_dir / "pg_ctl"), "--version"], capture_output=True, text=True).stdout
        found = re.search(r"\) (\d+)", version)
        if found and found.group(1) != created_by:
            raise StackError(
                f"{self.paths.data_dir} was created by PostgreSQL {created_by} but the programs in {self.bin_dir} "
                f"are version {found.group(1)}: set postgres.bin_dir to version {created_by}'s, or delete the "
                "folder to start empty (Dagster's run history is lost)"
            )

    def _create_database(self) -> None:
        """CREATE DATABASE dagster unless it exists (psql's \\gexec runs the query's one row, if any)."""
        query = (
            f"SELECT 'CREATE DATABASE {DAGSTER_DB}' "
            f"WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '{DAGSTER_DB}')\\gexec\n"
        )
        command = [str(self.bin_dir / "psql"), "-X", "-q", "-w", "-v", "ON_ERROR_STOP=1"]
        command += ["-h", HOST, "-p", str(self.settings.port), "-U", SUPERUSER, "-d", "postgres"]
        result = subprocess.run(command, input=query, capture_output=True, text=True)
        if result.returncode != 0:
            raise StackError(f"could not create the {DAGSTER_DB} database: {result.stderr.strip()}")

    def _log_tail(self, lines: int = 15) -> str:
        try:
            tail = self.paths.log_file.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            tail = []
        return "\n".join([*tail, f"see {self.paths.log_file}"])


def postgres_server(settings: EspSettings) -> PostgresServer:
    return PostgresServer(settings.postgres, settings.run_dir)


def dagster_storage(settings: EspSettings) -> dict[str, object]:
    """Dagster's `storage:` block for esp's server (no password: it trusts loopback connections).

    The scheme names the driver dagster-postgres installs (psycopg2): SQLAlchemy 2.1 maps a bare
    `postgresql://` to psycopg 3, which nothing installs."""
    database = {"hostname": HOST, "username": SUPERUSER, "db_name": DAGSTER_DB, "port": settings.postgres.port}
    return {"postgres": {"postgres_db": {**database, "scheme": "postgresql+psycopg2"}}}
