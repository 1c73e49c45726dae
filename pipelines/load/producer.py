"""Running a load against Kafka: paced runs (`run_load`) and as-fast-as-possible pre-loads (`preload`).

One or several producer processes (multiprocessing, spawn) each carry an equal share of the
target rate and their own blocks of records (see `records.py`), pace themselves with
`pacing.run_paced`, and report progress and a final result through a queue. The parent adds
them up into a `LoadReport`. SIGTERM and Ctrl-C stop every producer, which flush, and the run
still returns its report (marked stopped_early).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import queue as queue_module
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.kafka_topics import KafkaUnavailableError, require_topics
from pipelines.load.pacing import PacingResult, Progress, run_paced, run_unpaced
from pipelines.load.profiles import rate_profile
from pipelines.load.records import Batch, RecordSource, counts_by_name
from pipelines.load.spec import LoadSpec
from pipelines.settings import KafkaConnection, kafka_connection

READY_TIMEOUT_S = 60.0  # spawning a process and connecting a producer, on a busy 2-core machine
STOP_GRACE_S = 30.0  # how long stopped producers get to flush
STICKY_RECORDS = 1000  # unkeyed records sent to one partition before moving to the next


class LoadError(RuntimeError):
    """A producer process failed; the message carries its error."""


class KafkaSink:
    """A kafka-python producer tuned for throughput: batching, linger, no idempotence."""

    def __init__(
        self, bootstrap_servers: KafkaConnection | str, spec: LoadSpec, partitions: int = 1, first_partition: int = 0
    ) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        try:
            self._producer = KafkaProducer(
                **kafka_connection(bootstrap_servers).client_kwargs(),
                acks=spec.acks if spec.acks == "all" else int(spec.acks),
                linger_ms=spec.linger_ms,
                batch_size=spec.batch_bytes,
                enable_idempotence=False,  # idempotence forces acks=all; a load generator wants throughput
                allow_auto_create_topics=False,
                metrics_enabled=False,  # per-record metrics cost CPU the generator needs
            )
        except (KafkaError, OSError) as err:
            raise KafkaUnavailableError(f"no Kafka broker answers at {bootstrap_servers} ({err})") from err
        self._topic = spec.topic
        self._keyed = spec.key != "none"
        self._partitions = max(1, partitions)
        self._next_partition = first_partition % self._partitions
        self.errors = 0
        self.first_error: str | None = None

    def _on_error(self, err: BaseException) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = repr(err)

    def send(self, batch: Batch) -> None:
        send, topic, on_error = self._producer.send, self._topic, self._on_error
        if self._keyed:  # Kafka's own key hash decides, so consumers see the usual key -> partition
            for value, key in zip(batch.values, batch.keys, strict=True):
                send(topic, value=value, key=key).add_errback(on_error)
            return
        # Unkeyed: whole chunks to one partition in turn (like Kafka's sticky partitioner), which
        # skips kafka-python's per-record partitioner call, a fifth of its send cost.
        values = batch.values
        for begin in range(0, len(values), STICKY_RECORDS):
            partition = self._next_partition
            self._next_partition = (partition + 1) % self._partitions
            for value in values[begin : begin + STICKY_RECORDS]:
                send(topic, value=value, partition=partition).add_errback(on_error)

    def flush(self) -> None:
        self._producer.flush()

    def close(self) -> None:
        self._producer.close()


@dataclass(frozen=True)
class ProducerJob:
    """What one producer process does (picklable: it crosses into a spawned process)."""

    spec: LoadSpec
    bootstrap_servers: KafkaConnection | str
    index: int
    count: int
    records: int | None  # None: a paced run over the profile; N: pre-load exactly N (all processes)
    partitions: int = 1  # of the topic, for spreading unkeyed records


@dataclass
class WorkerOutcome:
    """One producer's result, sent back to the parent."""

    index: int
    pacing: PacingResult
    counts: np.ndarray
    late_records: int
    errors: int
    first_error: str | None


def _sink_for(job: ProducerJob) -> KafkaSink:
    return KafkaSink(job.bootstrap_servers, job.spec, partitions=job.partitions, first_partition=job.index)


def _produce(
    job: ProducerJob, sink: KafkaSink, should_stop: Callable[[], bool], on_progress: Callable[[Progress], None]
) -> WorkerOutcome:
    source = RecordSource(job.spec, job.index, job.count, limit=job.records)
    if job.records is None:
        profile = rate_profile(job.spec).scaled(1.0 / job.count)
        pacing = run_paced(
            profile,
            source,
            sink,
            slice_s=job.spec.slice_ms / 1000,
            max_backlog_s=job.spec.max_backlog_s,
            should_stop=should_stop,
            on_progress=on_progress,
        )
    else:
        pacing = run_unpaced(source, sink, should_stop=should_stop, on_progress=on_progress)
    return WorkerOutcome(
        index=job.index,
        pacing=pacing,
        counts=source.encoder.counts,
        late_records=source.encoder.late_records,
        errors=sink.errors,
        first_error=sink.first_error,
    )


def _worker_main(job: ProducerJob, out: Any, go: Any, stop: Any) -> None:
    """Entry point of a producer process: connect, report ready, wait for go, produce, report."""
    stopped = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stopped.set()  # the parent decides; we only stop pacing and flush

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        sink = _sink_for(job)
    except Exception as err:  # noqa: BLE001 - every failure must reach the parent
        out.put(("error", job.index, f"{err.__class__.__name__}: {err}"))
        return
    try:
        out.put(("ready", job.index, None))
        while not go.wait(0.1):
            if stop.is_set() or stopped.is_set():
                break  # still report (an empty run), so the parent never waits for a silent child
        outcome = _produce(
            job,
            sink,
            should_stop=lambda: stopped.is_set() or stop.is_set(),
            on_progress=lambda p: out.put(("progress", job.index, p)),
        )
        out.put(("done", job.index, outcome))
    except Exception as err:  # noqa: BLE001
        out.put(("error", job.index, f"{err.__class__.__name__}: {err}"))
    finally:
        sink.close()


@dataclass(frozen=True)
class LoadProgress:
    """Where a whole load stands, for progress bars."""

    elapsed_s: float
    sent: int
    target_so_far: int  # what the profile asked for up to now (paced runs) or the goal (pre-loads)
    target_total: int


@dataclass
class LoadReport:
    """The summary of a load: sent vs target, overall and per second, and the counts sent."""

    spec: LoadSpec
    processes: int
    duration_s: float  # planned wall-clock length (paced) or the time taken (pre-load)
    elapsed_s: float  # start to the end of the slowest producer's final flush
    target_records: int  # what the profile asked for up to where the run ended
    records_sent: int
    dropped: int  # records given up because producers fell more than max_backlog_s behind
    errors: int  # records the broker did not acknowledge
    late_records: int
    stopped_early: bool
    per_second_target: list[float]
    per_second_sent: list[int]
    count_array: np.ndarray = field(repr=False)
    first_error: str | None = None

    @property
    def target_mean_rps(self) -> float:
        return self.target_records / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def achieved_mean_rps(self) -> float:
        return self.records_sent / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def counts(self) -> dict[str, int]:
        """Word -> occurrences (words) or campaign_id -> view events (ads) of what was sent."""
        return counts_by_name(self.spec, self.count_array)

    def summary(self) -> dict[str, Any]:
        """JSON-friendly figures (no per-key counts)."""
        return {
            "profile": self.spec.profile,
            "kind": self.spec.kind,
            "topic": self.spec.topic,
            "processes": self.processes,
            "duration_s": round(self.duration_s, 3),
            "elapsed_s": round(self.elapsed_s, 3),
            "target_records": self.target_records,
            "records_sent": self.records_sent,
            "dropped": self.dropped,
            "errors": self.errors,
            "late_records": self.late_records,
            "target_mean_rps": round(self.target_mean_rps, 1),
            "achieved_mean_rps": round(self.achieved_mean_rps, 1),
            "stopped_early": self.stopped_early,
            "per_second_target": [round(x, 1) for x in self.per_second_target],
            "per_second_sent": self.per_second_sent,
        }


def _merge(
    spec: LoadSpec, outcomes: list[WorkerOutcome], duration_s: float, per_second_target: list[float]
) -> LoadReport:
    seconds = max([len(per_second_target)] + [len(o.pacing.per_second_sent) for o in outcomes])
    per_second = np.zeros(seconds, dtype=np.int64)
    for o in outcomes:
        per_second[: len(o.pacing.per_second_sent)] += np.asarray(o.pacing.per_second_sent, dtype=np.int64)
    errors = sum(o.errors for o in outcomes)
    sent = sum(o.pacing.sent for o in outcomes)
    elapsed = max((o.pacing.elapsed_s for o in outcomes), default=0.0)
    stopped = any(o.pacing.stopped_early for o in outcomes)
    return LoadReport(
        spec=spec,
        processes=len(outcomes),
        duration_s=duration_s if duration_s > 0 else elapsed,
        elapsed_s=elapsed,
        target_records=sum(o.pacing.target for o in outcomes),
        records_sent=sent - errors,
        dropped=sum(o.pacing.dropped for o in outcomes),
        errors=errors,
        late_records=sum(o.late_records for o in outcomes),
        stopped_early=stopped,
        per_second_target=per_second_target if per_second_target else [],
        per_second_sent=per_second.tolist(),
        count_array=sum((o.counts for o in outcomes), start=np.zeros_like(outcomes[0].counts)),
        first_error=next((o.first_error for o in outcomes if o.first_error), None),
    )


@contextmanager
def _stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Route SIGTERM and SIGINT (Ctrl-C) to `stop` while the load runs, so producers flush and the
    caller still gets a report. Signal handlers can only be set on the main thread; elsewhere
    the caller's own handling stays."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handled = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, lambda signum, frame: stop()) for sig in handled}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_in_process(job: ProducerJob, on_progress: Callable[[Progress], None]) -> WorkerOutcome:
    stopped = threading.Event()
    sink = _sink_for(job)
    try:
        with _stop_on_signals(stopped.set):
            return _produce(job, sink, stopped.is_set, on_progress)
    finally:
        sink.close()


class _ProcessPool:
    """Spawned producer processes and the queue they report on."""

    def __init__(self, jobs: list[ProducerJob]) -> None:
        ctx = mp.get_context("spawn")  # no fork: the parent may hold threads (rich, kafka admin)
        self.out = ctx.Queue()
        self.go = ctx.Event()
        self.stop = ctx.Event()
        self.processes = [
            ctx.Process(target=_worker_main, args=(job, self.out, self.go, self.stop), name=f"esp-load-{job.index}")
            for job in jobs
        ]

    def start(self) -> None:
        for p in self.processes:
            p.start()

    def wait_ready(self) -> None:
        ready: set[int] = set()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(ready) < len(self.processes):
            try:
                kind, index, payload = self.out.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue_module.Empty:
                raise LoadError(f"producer processes not ready after {READY_TIMEOUT_S:.0f} s") from None
            if kind == "error":
                raise _as_error(payload)
            ready.add(index)

    def collect(self, on_progress: Callable[[int, Progress], None]) -> list[WorkerOutcome]:
        outcomes: dict[int, WorkerOutcome] = {}
        errors: list[str] = []
        while len(outcomes) + len(errors) < len(self.processes):
            try:
                kind, index, payload = self.out.get(timeout=0.5)
            except queue_module.Empty:
                if not any(p.is_alive() for p in self.processes) and self.out.empty():
                    errors.append("a producer process exited without reporting")
                    break
                continue
            except KeyboardInterrupt:
                self.stop.set()  # producers flush and report; keep collecting
                continue
            if kind == "progress":
                on_progress(index, payload)
            elif kind == "done":
                outcomes[index] = payload
            elif kind == "error":
                errors.append(payload)
                self.stop.set()
        if errors:
            raise _as_error(errors[0])
        return [outcomes[i] for i in sorted(outcomes)]

    def close(self) -> None:
        self.stop.set()
        started = [p for p in self.processes if p.pid is not None]
        deadline = time.monotonic() + STOP_GRACE_S
        while any(p.is_alive() for p in started) and time.monotonic() < deadline:
            self._drain()  # a child cannot exit while its queue feeder waits on a full pipe
            for p in started:
                p.join(timeout=0.05)
        for p in started:
            if p.is_alive():
                p.terminate()  # our own child, by its handle
                p.join(timeout=5)

    def _drain(self) -> None:
        try:
            while True:
                self.out.get_nowait()
        except queue_module.Empty:
            pass


def _as_error(message: str) -> Exception:
    if "NoBrokersAvailable" in message or "KafkaUnavailableError" in message:
        return KafkaUnavailableError(message)
    return LoadError(f"producer failed: {message}")


def _run_jobs(
    jobs: list[ProducerJob],
    on_progress: Callable[[LoadProgress], None] | None,
    target_at: Callable[[float], int],
    total: int,
) -> list[WorkerOutcome]:
    """Run the jobs in this process (one job) or in spawned processes, forwarding progress."""
    latest: dict[int, Progress] = {}

    def forward(index: int, progress: Progress) -> None:
        latest[index] = progress
        if on_progress is not None:
            elapsed = max(p.elapsed_s for p in latest.values())
            sent = sum(p.sent for p in latest.values())
            on_progress(LoadProgress(elapsed, sent, target_at(elapsed), total))

    if len(jobs) == 1:
        return [_run_in_process(jobs[0], lambda p: forward(0, p))]
    pool = _ProcessPool(jobs)
    try:
        with _stop_on_signals(pool.stop.set):
            pool.start()
            pool.wait_ready()
            pool.go.set()
            return pool.collect(forward)
    finally:
        pool.close()


def run_load(
    spec: LoadSpec, bootstrap_servers: KafkaConnection | str, on_progress: Callable[[LoadProgress], None] | None = None
) -> LoadReport:
    """Produce the spec's profile to its topic for its duration; returns sent vs target per second.

    Raises KafkaUnavailableError (no broker) or UnknownTopicError (no such topic) before sending.
    """
    partitions = require_topics(bootstrap_servers, [spec.topic])[spec.topic]
    profile = rate_profile(spec)
    count = spec.producer_processes()
    jobs = [ProducerJob(spec, bootstrap_servers, i, count, None, partitions) for i in range(count)]
    target_at = lambda t: int(profile.records_due(t))  # noqa: E731
    outcomes = _run_jobs(jobs, on_progress, target_at, profile.total_records)
    return _merge(spec, outcomes, profile.duration_s, profile.per_second_targets().tolist())


def preload(
    spec: LoadSpec,
    bootstrap_servers: KafkaConnection | str,
    records: int,
    on_progress: Callable[[LoadProgress], None] | None = None,
) -> LoadReport:
    """Produce exactly `records` records of the spec as fast as possible (the rate profile is ignored).

    The records, and so `report.counts`, equal `expected_counts(spec, records)` whatever
    `spec.processes` is.
    """
    if records < 1:
        raise ValueError("preload needs at least one record")
    partitions = require_topics(bootstrap_servers, [spec.topic])[spec.topic]
    wanted = spec.processes or os.cpu_count() or 1  # processes=0: as fast as the machine allows
    count = min(wanted, math.ceil(records / spec.block_records))
    jobs = [ProducerJob(spec, bootstrap_servers, i, count, records, partitions) for i in range(count)]
    outcomes = _run_jobs(jobs, on_progress, lambda t: records, records)
    return _merge(spec, outcomes, 0.0, [])
