"""The test suite's own hygiene: a stream process a failed test left running is killed after it."""

from __future__ import annotations

import subprocess

import psutil

from tests.integration import streams
from tests.waiting import wait_for


def test_leftover_stream_process_groups_are_killed():
    leftover = subprocess.Popen(["sleep", "600"], start_new_session=True)
    finished = subprocess.Popen(["true"], start_new_session=True)
    finished.wait()
    streams._STARTED.extend([leftover, finished])
    try:
        assert streams.kill_leftover_streams() == 1
        assert leftover.poll() is not None
        assert streams._STARTED == []
    finally:
        if leftover.poll() is None:
            leftover.kill()


def test_a_killed_command_takes_its_descendants_in_their_own_groups_with_it(tmp_path):
    pids = tmp_path / "pids"
    # A command like `esp soak`: services started in process groups of their own, then a wait.
    script = f"setsid sleep 600 & echo $! >> {pids}; (sleep 600 & echo $! >> {pids}; wait) & wait"
    command = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    descendants = []
    try:
        wait_for(
            "the command's two descendants", lambda: pids.exists() and len(pids.read_text().split()) >= 2, 30, 0.05
        )
        descendants = [psutil.Process(int(pid)) for pid in pids.read_text().split()]
        streams.kill_tree(command)
        assert command.poll() is not None
        _, alive = psutil.wait_procs(descendants, timeout=10)
        assert alive == [], f"descendants outlived the command: {alive}"
    finally:
        for process in descendants:
            if process.is_running():
                process.kill()
