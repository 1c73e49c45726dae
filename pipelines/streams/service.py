"""Run one elastic stream until told to stop: the query, its probes, and periodic observations.

Used by the `esp stream run` command and by the Dagster stream assets (which turn each
observation into an AssetObservation). Stopping is graceful: the running micro-batch finishes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kafka.errors import KafkaError
from pyspark.sql import SparkSession

from pipelines.kafka_topics import UnknownTopicError, end_offsets
from pipelines.probes import latency_percentiles
from pipelines.settings import ExecutorScalingSettings
from pipelines.streams.metrics import BatchMetrics, consumed_offsets, kafka_lag
from pipelines.streams.probe_emitter import ProbeEmitter
from pipelines.streams.runner import ElasticStream
from pipelines.streams.spec import StreamSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageFigures:
    """One elastic stage of a multi-stage job at its last batch: channels, rows in and out (their
    ratio is its selectivity), its own job's time and its probes' p99 (through the stages before it)."""

    stage: str
    channels: int
    rows_in: int
    rows_out: int
    stage_ms: float
    p99_ms: float

    @classmethod
    def of(cls, metrics: BatchMetrics) -> StageFigures:
        return cls(
            metrics.stage,
            metrics.channels,
            metrics.input_records,
            metrics.output_rows or 0,
            metrics.stage_ms or 0.0,
            latency_percentiles(metrics.probe_latencies)["p99"],
        )

    def as_metadata(self) -> dict[str, float | int]:
        prefix = f"stage_{self.stage}"
        return {
            f"{prefix}_channels": self.channels,
            f"{prefix}_rows_in": self.rows_in,
            f"{prefix}_rows_out": self.rows_out,
            f"{prefix}_ms": round(self.stage_ms, 1),
            f"{prefix}_probe_p99_ms": round(self.p99_ms, 1),
        }


@dataclass(frozen=True)
class Observation:
    """What the stream looks like now: the figures the UI shows."""

    batch_id: int | None
    epoch: int
    channels: int
    input_rows_per_s: float
    processed_rows_per_s: float
    lag_records: int
    latency_ms: dict[str, float]
    batches_done: int
    rejected_records: int
    state_keys: int = 0
    state_bytes: int = 0
    probe_failures_in_a_row: int = 0
    """Probe rounds the emitter failed to send since its last good one (a broker outage shows here)."""
    predicted_recovery_s: float = 0.0
    """The longest recovery a channel would need now, as its snapshot policy predicts (seed 003)."""
    snapshots_written: int = 0
    """Channel snapshots written in the observation window."""
    channels_moved: int = 0
    """Channel tasks that ran on another executor than in their previous batch, in the window."""
    rebuilt_channels: int = 0
    """Channel working sets rebuilt from the durable history in the window (a move's cost)."""
    moved_open_ms: float = 0.0
    """Time moved channels spent getting their working set current on their new executor, in the window."""
    executors: int | None = None
    """Executors the stream had at its last batch (None: executors do not follow channels)."""
    stages: tuple[StageFigures, ...] = ()
    """A multi-stage job's every stage at its last batch (empty for a one-stage job)."""

    def as_metadata(self) -> dict[str, float | int]:
        following = {} if self.executors is None else {"executors": self.executors}
        per_stage = {key: value for stage in self.stages for key, value in stage.as_metadata().items()}
        return (
            following
            | per_stage
            | {
                "batch_id": -1 if self.batch_id is None else self.batch_id,
                "layout_epoch": self.epoch,
                "channels": self.channels,
                "input_rows_per_s": round(self.input_rows_per_s, 1),
                "processed_rows_per_s": round(self.processed_rows_per_s, 1),
                "lag_records": self.lag_records,
                "probe_latency_p50_ms": round(self.latency_ms["p50"], 1),
                "probe_latency_p99_ms": round(self.latency_ms["p99"], 1),
                "batches_done": self.batches_done,
                "rejected_records": self.rejected_records,
                "state_keys": self.state_keys,
                "state_bytes": self.state_bytes,
                "probe_failures_in_a_row": self.probe_failures_in_a_row,
                "predicted_recovery_s": round(self.predicted_recovery_s, 3),
                "snapshots_written": self.snapshots_written,
                "channels_moved": self.channels_moved,
                "rebuilt_channels": self.rebuilt_channels,
                "moved_open_ms": round(self.moved_open_ms, 1),
            }
        )


class StreamService:
    """Owns one ElasticStream and the threads around it."""

    def __init__(
        self, spark: SparkSession, spec: StreamSpec, executor_scaling: ExecutorScalingSettings | None = None
    ) -> None:
        scaling = executor_scaling or ExecutorScalingSettings()
        self.stream = ElasticStream(spark, spec, on_metrics=self._record, executor_scaling=scaling)
        self.spec = self.stream.spec
        self._recent: list[BatchMetrics] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.probes: ProbeEmitter | None = None
        self._last_lag = 0

    def _record(self, metrics: BatchMetrics) -> None:
        with self._lock:
            self._recent = (self._recent + [metrics])[-200:]

    def start(self) -> None:
        self.stream.start()
        self.probes = ProbeEmitter(
            self.spec.kafka,
            self.spec.input_topic,
            self.stream.registry.committed,
            self.spec.probe_period_s,
            later_stages=self.stream.later_layouts,
        )
        self.probes.start()

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        if self.probes is not None:
            self.probes.stop()
        self.stream.stop()

    def observe(self, window_s: float) -> Observation:
        query = self.stream.query
        progress = query.lastProgress if query is not None else None
        with self._lock:
            recent = [m for m in self._recent if m.wall_time >= time.time() - window_s] or self._recent[-1:]
        last = recent[-1] if recent else None
        return Observation(
            batch_id=last.batch_id if last else None,
            epoch=last.epoch if last else self.stream.registry.committed().epoch,
            channels=last.channels if last else self.stream.registry.committed().n_channels,
            input_rows_per_s=float((progress or {}).get("inputRowsPerSecond") or 0.0),
            processed_rows_per_s=float((progress or {}).get("processedRowsPerSecond") or 0.0),
            lag_records=self._lag(progress),
            latency_ms=latency_percentiles([lat for m in recent for lat in m.probe_latencies]),
            batches_done=len(self._recent),
            rejected_records=sum(m.rejected_records for m in recent),
            state_keys=sum(c.state_keys for c in last.per_channel) if last else 0,
            state_bytes=sum(c.state_bytes or 0 for c in last.per_channel) if last else 0,
            probe_failures_in_a_row=self.probes.health().failures_in_a_row if self.probes is not None else 0,
            predicted_recovery_s=max((c.predicted_recovery_s or 0.0 for c in last.per_channel), default=0.0)
            if last
            else 0.0,
            snapshots_written=sum(len(m.snapshots) for m in recent),
            channels_moved=sum(m.channels_moved or 0 for m in recent),
            rebuilt_channels=sum(m.rebuilt_channels for m in recent),
            moved_open_ms=sum(m.moved_open_ms or 0.0 for m in recent),
            executors=last.executors if last else None,
            stages=self._stage_figures(),
        )

    def _stage_figures(self) -> tuple[StageFigures, ...]:
        """Every stage's figures at the last batch (none for a one-stage job, or before a batch ended)."""
        last = [runtime.last_metrics for runtime in self.stream.stages]
        if len(last) < 2:
            return ()
        return tuple(StageFigures.of(metrics) for metrics in last if metrics is not None)

    def _lag(self, progress: dict | None) -> int:
        """Records behind the topic's end; the last known figure while the broker cannot say (an
        observation must never stop the stream: a Kafka node down made it do so once)."""
        try:
            ends = end_offsets(self.spec.kafka, self.spec.input_topic)
        except (KafkaError, OSError, UnknownTopicError) as error:  # a node down, its partitions moving
            log.warning("lag of %s unknown now (%s); showing the last known %d", self.spec.name, error, self._last_lag)
            return self._last_lag
        self._last_lag = sum(kafka_lag(ends, consumed_offsets(progress, self.spec.input_topic)).values())
        return self._last_lag

    def run(
        self, observe_every_s: float, on_observation: Callable[[Observation], None], max_runtime_s: float | None = None
    ) -> None:
        """Start, then observe every `observe_every_s` until stopped, timed out or failed."""
        self.start()
        started = time.monotonic()
        try:
            while not self._stop.wait(observe_every_s):
                query = self.stream.ended_unasked()
                if query is not None:
                    error = query.exception()
                    raise (
                        RuntimeError(f"stream {self.spec.name} stopped: {error}")
                        if error
                        else RuntimeError(f"stream {self.spec.name} stopped")
                    )
                on_observation(self.observe(observe_every_s))
                if max_runtime_s is not None and time.monotonic() - started >= max_runtime_s:
                    break
        finally:
            self.stop()
