"""A background thread that sends one eSault probe per channel every PROBE_PERIOD.

It follows the committed layout (re-reading it each period), so after a rescale the probes
address the new channels.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from elasticity.layout import Layout
from pipelines.probes import PROBE_KAFKA_KEY, make_probes, probe_keys


class ProbeEmitter(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, current_layout: Callable[[], Layout], period_s: float) -> None:
        super().__init__(name="esp-probe-emitter", daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.current_layout = current_layout
        self.period_s = period_s
        self._stop = threading.Event()
        self._keys: dict[int, dict[int, str]] = {}
        self.sent = 0

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=0)
        try:
            while not self._stop.wait(self.period_s):
                self._send_round(producer)
        finally:
            producer.close(timeout=5)

    def _send_round(self, producer) -> None:
        layout = self.current_layout()
        keys = self._keys.get(layout.epoch)
        if keys is None:
            keys = self._keys[layout.epoch] = probe_keys(layout)
        for probe in make_probes(layout, keys):
            producer.send(self.topic, key=PROBE_KAFKA_KEY, value=probe.to_json())
            self.sent += 1
        producer.flush(timeout=5)
