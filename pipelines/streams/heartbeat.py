"""The stream process's heartbeat: proof, readable from outside, that a stream's driver is alive.

A Dagster run whose process was SIGKILLed (or whose code server died) stays STARTED for good:
the default run launcher cannot check a run worker's health. The driver therefore publishes
`<control>/heartbeat.json` (host, pid, process start time, time of the beat) every few seconds,
and the supervisor sensor marks a STARTED run failed once its heartbeat is stale or its process
is gone, so the run is restarted like any failed one.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass

import psutil

from elasticity.state import Location

HEARTBEAT = "heartbeat.json"


@dataclass(frozen=True)
class Heartbeat:
    host: str
    pid: int
    process_started_at: float
    at: float

    @classmethod
    def of_this_process(cls, now: float) -> Heartbeat:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, psutil.Process(pid).create_time(), now)


def read_heartbeat(control_dir: str) -> Heartbeat | None:
    """The last beat, or None if there is none or it does not parse (treated as no beat)."""
    location = Location.of(control_dir)
    if not location.exists(HEARTBEAT):
        return None
    try:
        return Heartbeat(**location.read_json(HEARTBEAT))
    except (ValueError, TypeError):
        return None


def why_dead(beat: Heartbeat | None, now: float, stale_after_s: float, host: str | None = None) -> str | None:
    """Why the beating process must be taken for dead, or None while it may be alive."""
    if beat is None:
        return "the stream never wrote a heartbeat"
    if beat.host == (host or socket.gethostname()):
        try:
            alive = psutil.Process(beat.pid).create_time() == beat.process_started_at
        except psutil.NoSuchProcess:
            alive = False
        if not alive:
            return f"its driver process {beat.pid} on {beat.host} is gone"
    if now - beat.at > stale_after_s:
        return f"no heartbeat for {now - beat.at:.0f} s (over {stale_after_s:.0f} s)"
    return None


class HeartbeatWriter:
    """A daemon thread that beats every `period_s` until stopped."""

    def __init__(self, control_dir: str, period_s: float = 5.0) -> None:
        self.location = Location.of(control_dir)
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="esp-heartbeat", daemon=True)

    def start(self) -> HeartbeatWriter:
        self.beat()
        self._thread.start()
        return self

    def beat(self) -> None:
        self.location.publish_bytes(HEARTBEAT, json.dumps(asdict(Heartbeat.of_this_process(time.time()))).encode())

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.beat()
            except OSError:  # a full or vanished disk must not end the stream; the beat goes stale
                pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.period_s + 1)
