"""Publishes each batch's `BatchMetrics` to the stream's metrics topic without ever failing the batch.

Metrics are for the sensors; losing some during a broker outage is acceptable, stopping the
stream for them is not (a send that cannot reach the broker used to block the batch for a
minute, then fail it). A failed publish is counted, the producer is dropped, and publishing
pauses for a capped doubling backoff; batches in between are counted as dropped. The next
record that gets through says how many were dropped (`metrics_dropped`), so the gap is visible.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from pipelines.settings import KafkaConnection
from pipelines.streams.metrics import BatchMetrics
from pipelines.streams.probe_emitter import ProducerFactory, close_quietly, kafka_producer

log = logging.getLogger(__name__)


class MetricsPublisher:
    """Sends metrics records to one topic; a broker outage costs records, never the batch."""

    def __init__(
        self,
        bootstrap: KafkaConnection | str,
        topic: str,
        key: bytes,
        *,
        producer_factory: ProducerFactory = kafka_producer,
        max_backoff_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bootstrap, self.topic, self.key = bootstrap, topic, key
        self.producer_factory = producer_factory
        self.max_backoff_s = max_backoff_s
        self.clock = clock
        self.published = 0
        self.dropped = 0  # since the last record that got through
        self._failures_in_a_row = 0
        self._resume_at = 0.0
        self._producer: Any = None

    def publish(self, metrics: BatchMetrics) -> bool:
        """Send `metrics` (carrying the count of records dropped before it); False if it was dropped."""
        if self.clock() < self._resume_at:
            self.dropped += 1
            return False
        metrics.metrics_dropped = self.dropped
        try:
            self._producer = self._producer or self.producer_factory(self.bootstrap)
            self._producer.send(self.topic, key=self.key, value=metrics.to_json()).get(timeout=10)
        except Exception as error:  # any broker failure: the batch must go on without its metrics
            self._failed(error)
            return False
        self.published += 1
        self.dropped = 0
        self._failures_in_a_row = 0
        return True

    @property
    def next_try_at(self) -> float:
        """Clock time before which a publish is not tried (the backoff after a failure)."""
        return self._resume_at

    def close(self) -> None:
        self._producer = close_quietly(self._producer)

    def _failed(self, error: Exception) -> None:
        self.dropped += 1
        self._failures_in_a_row += 1
        self._producer = close_quietly(self._producer)
        backoff = min(self.max_backoff_s, 2.0 ** (self._failures_in_a_row - 1))
        self._resume_at = self.clock() + backoff
        log.warning(
            "metrics of the batch not published (%s: %s); next try in %.0f s", type(error).__name__, error, backoff
        )
