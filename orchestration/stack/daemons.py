"""What every long-running process esp starts has in common: a pid file naming it, checked against
the process's command line (a pid reused by another program is not ours), a detached start with
its output in a rotated console log, and a stop by SIGTERM, then SIGKILL.

The Kafka nodes, the Spark daemons and the object store use these; PostgreSQL is started and
stopped by its own `pg_ctl`.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

from orchestration.stack.log_files import rotate

# How long an empty command line is read again: the kernel closes the exec pipe `Popen` waits on
# before it sets the new program's arguments, so a process just spawned shows none for a moment.
EXEC_SETTLE_S = 2.0


def pid_from_file(pid_file: Path, is_ours: Callable[[list[str]], bool]) -> int | None:
    """The pid in `pid_file` if it names a live process whose command line `is_ours` accepts."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = _settled_cmdline(psutil.Process(pid))
    except (FileNotFoundError, ValueError, psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return pid if is_ours(cmdline) else None


def _settled_cmdline(process: psutil.Process) -> list[str]:
    """The command line of `process`, read again while it is empty (an exec in progress), up to
    `EXEC_SETTLE_S`."""
    deadline = time.monotonic() + EXEC_SETTLE_S
    while not (cmdline := process.cmdline()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return cmdline


def spawn_detached(
    command: Sequence[str],
    console_log: Path,
    pid_file: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start `command` in a new session, so that it outlives the CLI and a Ctrl-C in the shell,
    its output in `console_log` (the previous ones rotated to console.log.1..N, never appended
    forever); then write its pid file."""
    rotate(console_log)
    with open(console_log, "wb") as console:
        process = subprocess.Popen(
            list(command),
            stdout=console,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    pid_file.write_text(str(process.pid))
    return process


def stop_process(pid: int, timeout_s: float, started_by_it: Sequence[psutil.Process] = ()) -> None:
    """SIGTERM `pid`, SIGKILL it after `timeout_s`; then kill what it started (`started_by_it`,
    listed before the signal) if that outlived it."""
    try:
        process = psutil.Process(pid)
        process.send_signal(signal.SIGTERM)
    except psutil.NoSuchProcess:
        process = None
    alive = psutil.wait_procs([process], timeout=timeout_s)[1] if process is not None else []
    leftovers = [p for p in [*alive, *started_by_it] if p.is_running()]
    for leftover in leftovers:
        with contextlib.suppress(psutil.NoSuchProcess):  # it may end on its own meanwhile
            leftover.kill()
    psutil.wait_procs(leftovers, timeout=10)
