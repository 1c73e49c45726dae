"""The probe emitter outlives a broker outage: it backs off, rebuilds its producer, reports, recovers."""

from __future__ import annotations

import time

from elasticity.layout import Layout
from pipelines.streams.probe_emitter import ProbeEmitter
from tests.fakes.kafka import FlakyBroker


def _wait_until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_the_emitter_survives_an_outage_and_says_so():
    broker = FlakyBroker()
    layout = Layout.uniform(3)
    emitter = ProbeEmitter("b:9092", "t", lambda: layout, 0.01, producer_factory=broker.producer, max_backoff_s=0.05)
    emitter.start()
    try:
        _wait_until(lambda: broker.taken >= 6)
        broker.down = True
        _wait_until(lambda: emitter.health().failures_in_a_row >= 3)
        assert emitter.is_alive()
        health = emitter.health()
        assert health.failures >= 3 and "broker" in (health.last_error or "")
        broker.down = False
        taken_in_outage = broker.taken
        _wait_until(lambda: broker.taken >= taken_in_outage + 6)
        _wait_until(lambda: emitter.health().failures_in_a_row == 0)
        assert broker.producers >= 2  # rebuilt after the outage
    finally:
        emitter.stop()
        emitter.join(timeout=5)


def test_the_backoff_doubles_and_is_capped():
    emitter = ProbeEmitter("b", "t", lambda: Layout.uniform(1), 1.0, max_backoff_s=10.0)
    waits = []
    for _ in range(8):
        emitter._failed(RuntimeError("down"))
        waits.append(emitter._next_wait_s())
    assert 0.8 <= waits[0] <= 1.2 and 1.6 <= waits[1] <= 2.4
    assert max(waits) <= 12.0 and waits[-1] >= 8.0
