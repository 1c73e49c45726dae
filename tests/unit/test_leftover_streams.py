"""The test suite's own hygiene: a stream process a failed test left running is killed after it."""

from __future__ import annotations

import subprocess

from tests.integration import streams


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
