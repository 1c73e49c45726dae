"""A background thread that sends one eSault probe per channel (of every elastic stage) every PROBE_PERIOD.

It follows the committed layout (re-reading it each period), so after a rescale the probes
address the new channels. It never dies of a broker outage: a failed round is counted, the
producer is rebuilt, and the next round waits a capped, jittered, doubling backoff. Without
that, one broker blip ended the thread, every probe then timed out, and the controller scaled
out for nothing, up to the maximum. `health()` says how it fares, for the stream's metrics.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from elasticity.layout import Layout
from pipelines.probes import PROBE_KAFKA_KEY, Probe, make_probes, probe_keys
from pipelines.settings import KafkaConnection, kafka_connection
from pipelines.streams.names import FIRST_STAGE

ProducerFactory = Callable[[KafkaConnection | str], Any]


def kafka_producer(bootstrap: KafkaConnection | str) -> Any:
    from kafka import KafkaProducer

    return KafkaProducer(**kafka_connection(bootstrap).client_kwargs(), linger_ms=0, max_block_ms=5_000)


@dataclass(frozen=True)
class EmitterHealth:
    """How the probe emitter fares: failures since the last good round, in total, and the last error."""

    failures_in_a_row: int
    failures: int
    last_error: str | None
    last_sent_at: float | None


class ProbeEmitter(threading.Thread):
    def __init__(
        self,
        bootstrap: KafkaConnection | str,
        topic: str,
        current_layout: Callable[[], Layout],
        period_s: float,
        *,
        producer_factory: ProducerFactory = kafka_producer,
        max_backoff_s: float = 10.0,
        later_stages: Callable[[], Mapping[str, Layout]] = dict,
    ) -> None:
        super().__init__(name="esp-probe-emitter", daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.current_layout = current_layout
        self.period_s = period_s
        self.producer_factory = producer_factory
        self.max_backoff_s = max_backoff_s
        self.later_stages = later_stages
        """A multi-stage job's later stages' committed layouts, by stage: each gets its probes too."""
        self._stopping = threading.Event()
        self._keys: dict[tuple[str, int], dict[int, str]] = {}
        self._random = random.Random()
        self.sent = 0
        self._failures_in_a_row = 0
        self._failures = 0
        self._last_error: str | None = None
        self._last_sent_at: float | None = None

    def stop(self) -> None:
        self._stopping.set()

    def health(self) -> EmitterHealth:
        return EmitterHealth(self._failures_in_a_row, self._failures, self._last_error, self._last_sent_at)

    def run(self) -> None:
        producer = None
        while not self._stopping.wait(self._next_wait_s()):
            try:
                producer = producer or self.producer_factory(self.bootstrap)
                self._send_round(producer)
            except Exception as error:  # any failure of a round; the thread must outlive it
                self._failed(error)
                producer = close_quietly(producer)
        close_quietly(producer)

    def _next_wait_s(self) -> float:
        if self._failures_in_a_row == 0:
            return self.period_s
        backoff = min(self.max_backoff_s, max(self.period_s, 0.5) * 2 ** (self._failures_in_a_row - 1))
        return backoff * self._random.uniform(0.8, 1.2)  # jitter: emitters of many streams do not beat together

    def _failed(self, error: Exception) -> None:
        self._failures_in_a_row += 1
        self._failures += 1
        self._last_error = f"{type(error).__name__}: {error}"

    def _send_round(self, producer: Any) -> None:
        layouts = {FIRST_STAGE: self.current_layout(), **self.later_stages()}
        probes = [probe for stage, layout in layouts.items() for probe in self._probes(stage, layout)]
        futures = [producer.send(self.topic, key=PROBE_KAFKA_KEY, value=p.to_json()) for p in probes]
        producer.flush(timeout=5)
        for future in futures:
            future.get(timeout=5)  # raises if the broker did not take it
        self.sent += len(futures)
        self._failures_in_a_row = 0
        self._last_sent_at = time.time()

    def _probes(self, stage: str, layout: Layout) -> list[Probe]:
        keys = self._keys.get((stage, layout.epoch))
        if keys is None:
            keys = self._keys[(stage, layout.epoch)] = probe_keys(layout)
        return make_probes(layout, keys, stage=stage)


def close_quietly(producer: Any) -> None:
    if producer is not None:
        try:
            producer.close(timeout=1)
        except Exception:  # closing a producer of a dead broker may fail too; it is dropped anyway
            pass
    return None
