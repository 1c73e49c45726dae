"""The stream's heartbeat: a live process is alive, a dead or silent one is taken for dead."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from pipelines.streams.heartbeat import Heartbeat, HeartbeatWriter, read_heartbeat, why_dead


def test_a_beating_process_is_alive(tmp_path):
    writer = HeartbeatWriter(str(tmp_path), period_s=0.05).start()
    try:
        first = read_heartbeat(str(tmp_path))
        time.sleep(0.2)
        later = read_heartbeat(str(tmp_path))
    finally:
        writer.stop()
    assert first is not None and later is not None and later.at > first.at
    assert why_dead(later, time.time(), stale_after_s=30) is None


def test_a_gone_process_is_dead_at_once(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(child.pid).create_time()
    child.wait()
    beat = Heartbeat(Heartbeat.of_this_process(0).host, child.pid, started, time.time())
    assert "is gone" in (why_dead(beat, time.time(), stale_after_s=3600) or "")


def test_a_reused_pid_is_not_the_stream(tmp_path):
    me = Heartbeat.of_this_process(time.time())
    impostor = Heartbeat(me.host, me.pid, me.process_started_at - 100, me.at)
    assert "is gone" in (why_dead(impostor, time.time(), stale_after_s=3600) or "")


def test_a_silent_process_elsewhere_is_dead_after_the_timeout():
    beat = Heartbeat("another-host", 1, 0.0, at=1000.0)
    assert why_dead(beat, now=1020.0, stale_after_s=30) is None
    assert "no heartbeat for 40 s" in (why_dead(beat, now=1040.0, stale_after_s=30) or "")
    assert why_dead(None, now=0.0, stale_after_s=30) == "the stream never wrote a heartbeat"


def test_a_corrupt_heartbeat_reads_as_none(tmp_path):
    (tmp_path / "heartbeat.json").write_text("{half")
    assert read_heartbeat(str(tmp_path)) is None
