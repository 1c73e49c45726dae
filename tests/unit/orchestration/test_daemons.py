"""The lifecycle every daemon of the stack shares (`orchestration.stack.daemons`): a detached start
with a fresh console log per start and a pid file, a pid file trusted only for a process whose
command line is ours, and a stop that kills what ignores SIGTERM and what it started."""

from __future__ import annotations

import os
import sys
import time

import psutil

from orchestration.stack.daemons import pid_from_file, spawn_detached, stop_process

SLEEPER = "import sys, time; print(sys.argv[1], flush=True); time.sleep(600)"
STUBBORN = (
    "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); print('up', flush=True); time.sleep(600)"
)


def _wait_for(path, text: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.05)


def test_each_start_logs_to_a_fresh_console_log_and_writes_its_pid_file(tmp_path):
    log, pid_file = tmp_path / "console.log", tmp_path / "d.pid"
    first = spawn_detached([sys.executable, "-c", SLEEPER, "first start"], log, pid_file)
    _wait_for(log, "first start")
    second = spawn_detached([sys.executable, "-c", SLEEPER, "second start"], log, pid_file)
    try:
        _wait_for(log, "second start")
        assert "first start" not in log.read_text() and "first start" in (tmp_path / "console.log.1").read_text()
        assert int(pid_file.read_text()) == second.pid
        assert os.getsid(second.pid) == second.pid != os.getsid(0)  # its own session: a Ctrl-C here spares it
    finally:
        for process in (first, second):
            process.kill()
            process.wait()


def test_a_pid_file_counts_only_for_a_live_process_whose_command_line_is_ours(tmp_path):
    log, pid_file = tmp_path / "console.log", tmp_path / "d.pid"
    process = spawn_detached([sys.executable, "-c", SLEEPER, "marker-42"], log, pid_file)
    try:
        assert pid_from_file(pid_file, lambda cmdline: "marker-42" in cmdline) == process.pid
        assert pid_from_file(pid_file, lambda cmdline: "another program" in cmdline) is None  # a reused pid
    finally:
        process.kill()
        process.wait()
    assert pid_from_file(pid_file, lambda cmdline: True) is None  # dead
    pid_file.write_text("not a pid")
    assert pid_from_file(pid_file, lambda cmdline: True) is None
    assert pid_from_file(tmp_path / "missing.pid", lambda cmdline: True) is None


def test_a_process_caught_mid_exec_is_read_again_until_its_command_line_is_set(tmp_path, monkeypatch):
    # Right after `Popen` returns, /proc/<pid>/cmdline can still be empty (the exec pipe closes
    # before the kernel sets the new arguments); CI saw the pid file of a fresh start read as not ours.
    log, pid_file = tmp_path / "console.log", tmp_path / "d.pid"
    process = spawn_detached([sys.executable, "-c", SLEEPER, "marker-43"], log, pid_file)
    real_cmdline, reads = psutil.Process.cmdline, iter(range(10**6))
    monkeypatch.setattr(psutil.Process, "cmdline", lambda self: [] if next(reads) < 3 else real_cmdline(self))
    try:
        assert pid_from_file(pid_file, lambda cmdline: "marker-43" in cmdline) == process.pid
    finally:
        process.kill()
        process.wait()


def test_a_stop_kills_a_process_that_ignores_sigterm_and_what_it_started(tmp_path):
    log = tmp_path / "console.log"
    process = spawn_detached([sys.executable, "-c", STUBBORN], log, tmp_path / "d.pid")
    _wait_for(log, "up")
    children = psutil.Process(process.pid).children(recursive=True)
    assert children
    started = time.monotonic()
    stop_process(process.pid, timeout_s=1.0, started_by_it=children)
    process.wait(timeout=10)
    assert time.monotonic() - started >= 1.0  # SIGTERM first; SIGKILL only after the timeout
    assert not any(child.is_running() for child in children)
