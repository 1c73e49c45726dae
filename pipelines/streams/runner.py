"""The driver side of an elastic stream: one Structured Streaming query whose `foreachBatch`
routes each micro-batch through the elastic keyed stage, writes results exactly once, and
applies rescale requests at batch boundaries.

Exactly-once: Spark's checkpoint fixes each batch's offsets before it runs; the results and
bronze tables are overwritten per batch id; channel state is versioned by batch id (a replay
is a no-op). The Kafka results and dead-letter topics are at-least-once (a replayed batch
publishes again; records are keyed so consumers can keep the last value).

This module keeps the stream's lifecycle (lease, checkpoint check, start, stop, the query swap for
a new admission cap) and the batch loop; its collaborators do the rest: `topics` (the Kafka
topics made ready), `sinks` (a batch's table and topic writes), `stage_calls` (what the stage is
called with), `rescaling` (a pending rescale at the batch boundary), `cap_switch` (admission
decisions) and `reporting` (a batch's metrics and their producer).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from elasticity.layout import Layout
from elasticity.lease import Lease, acquire, ensure_free
from elasticity.migration import Migrator
from elasticity.migration.registry import LayoutRegistry
from elasticity.state import BytesCodec, HistoryBackend, Location, uris
from pipelines import kafka_io
from pipelines.dead_letters import rejected_count, split_counting_rejected
from pipelines.elastic_stage import StageSpec
from pipelines.settings import ExecutorScalingSettings
from pipelines.spark_session import warm_python_workers
from pipelines.spark_threads import run_concurrently
from pipelines.streams.admission import AdmissionGate, forget_unstarted_batch
from pipelines.streams.cap_switch import CapSwitch
from pipelines.streams.control import ControlChannel, RescaleResult
from pipelines.streams.executors import FollowingExecutors
from pipelines.streams.files import CheckpointMismatch, StreamFiles, checkpoint_mismatch
from pipelines.streams.jobs import BatchPlan, JobLogic, job_logic
from pipelines.streams.metrics import BatchMetrics, ChannelMetrics
from pipelines.streams.reporting import BatchContext, MetricsOutlet, batch_metrics
from pipelines.streams.rescaling import BatchBoundaryRescale
from pipelines.streams.sinks import BatchSinks
from pipelines.streams.snapshots import ChannelSnapshots
from pipelines.streams.spec import StreamSpec
from pipelines.streams.stage_calls import StageCalls
from pipelines.streams.table_retention import TableRetention
from pipelines.streams.topics import prepare_topics

log = logging.getLogger(__name__)


class StopRequested(RuntimeError):
    """Raised at a batch's start once a stop was asked: the query ends between two batches."""


def refuse_if_held(spec: StreamSpec) -> None:
    """LeaseHeld, naming the holder, if a live process writes `spec`'s stream: checked before a
    Spark session is built, so a second driver is refused in seconds, not after its start-up."""
    ensure_free(spec.elastic_root)


@dataclass
class ElasticStream:
    """One elastic stream: prepare its topics and folders, start it, observe it, stop it."""

    spark: SparkSession
    spec: StreamSpec
    on_metrics: Callable[[BatchMetrics], None] | None = None
    executor_scaling: ExecutorScalingSettings = field(default_factory=ExecutorScalingSettings)
    query: StreamingQuery | None = None
    last_metrics: BatchMetrics | None = None
    _migrator: Migrator | None = None
    _lease: Lease | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _query_lock: threading.Lock = field(default_factory=threading.Lock)
    _snapshots: ChannelSnapshots | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def ended_unasked(self) -> StreamingQuery | None:
        """The query if it ended without esp asking (a failure); None while it runs, or when it
        ended for a stop or for a new admission cap (the new query replaces it)."""
        query = self.query
        if query is None or self._stopping.is_set() or self.caps.swapping.is_set() or query.isActive:
            return None
        # Checked again after reading isActive: a swap may have begun (and ended) in between.
        if self._stopping.is_set() or self.caps.swapping.is_set() or self.query is not query:
            return None
        return query

    def __post_init__(self) -> None:
        # A spec changed by `model_copy` skips its validator: one spelling of the root, again.
        self.spec = self.spec.model_copy(update={"root": uris.canonical(self.spec.root)})
        self.logic: JobLogic = job_logic(self.spec)
        self.stage = StageSpec(
            self.spec.name,
            self.spec.elastic_root,
            self.spec.local_state,
            self.spec.store_kind,
            self.spec.service_ms_per_record,
        )
        self.registry = LayoutRegistry(Location.of(self.spec.elastic_root))
        self.control = ControlChannel(self.spec.control_dir)
        self.retention = TableRetention(self.spark, self.spec, self.logic.result_key_columns)
        self.admission = AdmissionGate(self.spec.admission, self.spec.control_dir) if self.spec.admission else None
        self.caps = CapSwitch(self.admission, self.spec.checkpoint, self.spec.input_topic)
        self.sinks = BatchSinks(self.spec, self.logic)
        self.stage_calls = StageCalls(self.spark, self.spec, self.registry)
        # The migrator and snapshots are passed as this stream's getters: both are rebuilt under
        # the lease's fence and closed at stop.
        self.executors = FollowingExecutors.of(self.spark, self.executor_scaling)
        self.rescaling = BatchBoundaryRescale(
            self.registry, self.control, self.migrator, self.snapshots, lambda: self.last_metrics, self._executor_target
        )
        self.metrics_outlet = MetricsOutlet(self.spec)

    # -- lifecycle ---------------------------------------------------------------------------

    def prepare(self) -> Layout:
        """Check the input topic (create it if the spec says how), create output topics, commit the
        first layout (or recover)."""
        prepare_topics(self.spec)
        Location.of(self.spec.elastic_root).ensure()
        self._take_lease()
        try:
            self.registry.initialize(Layout.uniform(self.spec.channels))
            self.check_checkpoint()
            recovered = self.migrator().recover()
            self.retention.recover()
        except BaseException:
            self._release_lease()
            raise
        if recovered.action != "nothing":
            log.warning("recovered an interrupted rescale: %s", recovered)
        return self.registry.committed()

    def _take_lease(self) -> None:
        """One writer per stream: LeaseHeld (naming the holder) if another process writes it."""
        if self._lease is None:
            self._lease = acquire(self.spec.elastic_root, f"stream driver of {self.spec.name}", self.spec.lease_ttl_s)
            self.stage = dataclasses.replace(self.stage, fence=self._lease.fence)
            self._migrator = None  # rebuilt with the fence

    def _release_lease(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def check_checkpoint(self) -> None:
        """Refuse to start when the checkpoint and the channels' state cannot both be right."""
        backend = self.migrator().backend
        applied = {channel: backend.open(channel).version.batch for channel in backend.channels()}
        files = StreamFiles(self.spec)
        problem = checkpoint_mismatch(self.spec.checkpoint, files.newest_planned_batch(), applied)
        if problem is not None:
            raise CheckpointMismatch(f"stream {self.spec.name}: {problem}")

    def start(self) -> StreamingQuery:
        self.prepare()
        warmed_s = warm_python_workers(self.spark, self.spec.channels)
        if warmed_s is not None:
            log.info("stream %s: %d Python workers started in %.2f s", self.spec.name, self.spec.channels, warmed_s)
        self.query = self._start_query()
        if self.admission is not None:
            threading.Thread(target=self._swap_on_cap_change, name=f"{self.spec.name}-admission", daemon=True).start()
        return self.query

    def _start_query(self) -> StreamingQuery:
        source = kafka_io.read_stream(self.spark, self.spec.kafka, self.spec.input_topic, self._records_per_batch())
        return (
            source.writeStream.queryName(self.spec.name)
            .foreachBatch(self.process_batch)
            .option("checkpointLocation", uris.spark_path(self.spec.checkpoint))
            .trigger(processingTime=f"{self.spec.trigger_seconds} seconds")
            .start()
        )

    def _records_per_batch(self) -> int | None:
        """The tighter of the configured cap and admission control's (None: no cap)."""
        caps = [self.spec.max_offsets_per_trigger, self.admission.cap_records if self.admission else None]
        present = [cap for cap in caps if cap is not None]
        return min(present) if present else None

    def stop(self, timeout_s: float = 120.0) -> None:
        """Stop at a batch boundary: let a running batch finish, refuse to begin the next one."""
        self._stopping.set()
        with self._query_lock:  # not while a swap starts a new query
            deadline = time.monotonic() + timeout_s
            while self.query is not None and self.query.isActive and time.monotonic() < deadline:
                if not self.query.status.get("isTriggerActive", False):
                    break
                time.sleep(0.05)
            if self.query is not None and self.query.isActive:
                self.query.stop()
        self.metrics_outlet.close()
        if self._snapshots is not None:
            self._snapshots.close()
            self._snapshots = None
        self.retention.close()  # no batch runs now: an unpublished staging is dropped
        if self._migrator is not None:
            self._migrator.backend.close()
            self._migrator = None
        self._release_lease()

    def _swap_on_cap_change(self) -> None:
        while not self._stopping.is_set():
            if self.caps.wait_for_change(0.5):
                self._swap_query()

    def _swap_query(self, commit_timeout_s: float = 60.0) -> None:
        """Stop the query once its last batch committed, forget a batch it planned under the old
        cap, start a new query with the new one. Measured: the next batch reports the pause."""
        started = time.perf_counter()
        try:
            with self._query_lock:
                if self._stopping.is_set() or self.query is None:
                    return
                # The batch that decided must be committed first: stopping inside it would replay it.
                files = StreamFiles(self.spec)
                deadline = time.monotonic() + commit_timeout_s
                while self.query.isActive and time.monotonic() < deadline:
                    committed = files.newest_committed_batch()
                    if committed is not None and committed >= self.caps.decided_by_batch:
                        break
                    time.sleep(0.01)
                self.query.stop()
                forgotten = forget_unstarted_batch(
                    self.spec.checkpoint,
                    lambda b: bool(self.rescaling.channels_holding(self.registry.committed(), b)),
                )
                self.caps.refusing.clear()
                self.caps.new_query = True  # before the query starts: its first batch reads it
                self.query = self._start_query()
            self.caps.restart_ms = (time.perf_counter() - started) * 1000
            replanned = "no batch planned under the old cap" if forgotten is None else f"batch {forgotten} replanned"
            log.warning(
                "admission: query restarted with %s records per batch in %.0f ms (%s)",
                self._records_per_batch(),
                self.caps.restart_ms,
                replanned,
            )
        finally:
            self.caps.refusing.clear()
            self.caps.swapping.clear()

    def migrator(self) -> Migrator:
        """The driver's migrator. It reads and writes channel state through the durable history
        only (`HistoryBackend`): the live working sets are in the executors' RocksDB, so opening
        RocksDB stores here would rebuild whole channels inside the pause; the history gives
        donate exactly the moved ranges, and executors apply the migration record by `sync()`.
        Keys are not counted here (that would fold every channel): the last batch's metrics
        already carry each channel's key count."""
        if self._migrator is None:
            # Bytes: the stores hold the operator codec's encoding, which a migration moves as is.
            backend = HistoryBackend(BytesCodec(), durable=self.spec.elastic_root)
            fence = self._lease.fence.check if self._lease is not None else None
            self._migrator = Migrator(
                Location.of(self.spec.elastic_root), backend, count_keys=False, max_workers=8, fence=fence
            )
        return self._migrator

    def snapshots(self) -> ChannelSnapshots:
        """The stream's snapshot policy and writer (`pipelines.streams.snapshots`)."""
        if self._snapshots is None:
            fence = self._lease.fence.check if self._lease is not None else None
            self._snapshots = ChannelSnapshots(self.spec.snapshots, self.spec.elastic_root, fence)
        return self._snapshots

    # -- one micro-batch ---------------------------------------------------------------------

    def process_batch(self, raw: DataFrame, batch_id: int) -> None:
        if self._stopping.is_set() or self.caps.refusing.is_set():
            # Nothing of this batch has happened yet; Spark replays it on the next start (or,
            # for a new cap, plans it again: forget_unstarted_batch).
            raise StopRequested(f"stream {self.spec.name} is stopping before batch {batch_id}")
        context = BatchContext(batch_id, time.perf_counter(), self.registry.committed())
        context.rescale = self._apply_pending_rescale(batch_id)
        context.phase_ms["rescale"] = (time.perf_counter() - context.started) * 1000
        context.layout = self.registry.routing_layout()
        executors_target = self._follow_executors(context.layout)
        # Before the batch writes anything: swap in a compaction staged in the background
        # (quick), then begin staging the next one if due (off this batch's time).
        started = time.perf_counter()
        if self.retention.publish_ready():
            context.phase_ms["compact"] = (time.perf_counter() - started) * 1000
        self.retention.start_if_due(batch_id)
        raw = raw.persist()
        try:
            metrics = self._run_batch(raw, context)
        finally:
            raw.unpersist()
        self._note_executors(metrics, executors_target)
        self._plan_snapshots(metrics)
        self.caps.after_batch(metrics)
        self._publish(metrics)

    def _apply_pending_rescale(self, batch_id: int) -> RescaleResult | None:
        """The horizontal barrier: a pending rescale is applied before the batch routes a record."""
        return self.rescaling.apply_pending(batch_id)

    def _executor_target(self, channels: int) -> int | None:
        """Executors `channels` channels get (None: executors do not follow channels here)."""
        return self.executor_scaling.executors_for(channels) if self.executors is not None else None

    def _follow_executors(self, layout: Layout) -> int | None:
        """Before the batch runs a task: the executors the layout's channels need asked for, the
        surplus released (those that served the fewest channels last batch); the target asked."""
        if self.executors is None:
            return None
        served = self.last_metrics.served_by_executor() if self.last_metrics is not None else Counter()
        try:
            return self.executors.reconcile(layout.n_channels, served).target
        except Exception:  # executors follow at best effort: the batch runs on those it has
            log.exception("asking for the executors of %d channels failed", layout.n_channels)
            return None

    def _note_executors(self, metrics: BatchMetrics, target: int | None) -> None:
        """Where the channels ran: executors asked and registered, channels that changed executor."""
        moved = metrics.moved_since(self.last_metrics)
        if moved is not None:
            metrics.channels_moved = len(moved)
            metrics.moved_open_ms = sum(c.open_ms for c in moved)
        if self.executors is not None:
            metrics.executors_target = target
            metrics.executors = len(self.executors.executor_ids())

    def _run_batch(self, raw: DataFrame, context: BatchContext) -> BatchMetrics:
        parsed = self.logic.parse(raw)
        try:
            good, rejected, counted = split_counting_rejected(parsed)
            plan = self.logic.plan(good, context.batch_id)
            if self.spec.archive_input or plan.late is not None:
                # Cached only for several readers: filling the cache cost a 500k-line batch
                # ~1 s, more than parsing the cached raw rows again (rejected rows are rare).
                parsed.persist()
            actions = {
                "late": lambda: self.sinks.write_late(plan.late, context.batch_id),
                "stage": lambda: self._run_stage(plan, raw, context),
            }
            if self.spec.archive_input:
                actions["archive"] = lambda: self.sinks.archive(good, context.batch_id)
            outputs, phase_ms = run_concurrently(actions)
            plan.finish()
            started = time.perf_counter()
            dead_letters = rejected_count(counted, rejected)
            if dead_letters:
                self.sinks.write_dead_letters(rejected, context.batch_id)
            phase_ms["dead_letters"] = (time.perf_counter() - started) * 1000
        finally:
            parsed.unpersist()
        channel_reports, rejected_by_stage = outputs["stage"]
        metrics = batch_metrics(self.spec.name, context, channel_reports, dead_letters)
        metrics.late_records = outputs["late"] + rejected_by_stage
        metrics.phase_ms = {**context.phase_ms, **phase_ms}
        return metrics

    def _run_stage(self, plan: BatchPlan, raw: DataFrame, context: BatchContext) -> tuple[list[ChannelMetrics], int]:
        """Run the elastic stage on the plan's input and probes, write results (and rows an operator
        rejected) exactly once per batch id; each channel's report and the rejected rows' count."""
        call = self.stage_calls.call(raw, context.layout, self.stage, context.batch_id)
        output = self.logic.stage(plan, call)
        # The Parquet write computes the stage (state is updated once, by this job); the Kafka copy
        # then reads the cached rows.
        if self.spec.results_to_kafka:
            output.source.persist()
        try:
            self.sinks.write_results(output.results, context.batch_id)
            if self.spec.results_to_kafka:
                self.sinks.publish_results(output.results)
            channel_reports = self.stage_calls.reports_of(call)
            rejected = sum(r.rejected_records for r in channel_reports)
            if rejected:
                # Read again only when some were (a recomputation if not cached: the replay contract).
                self.sinks.write_rejected(output.rejected, context.batch_id)
        finally:
            if self.spec.results_to_kafka:
                output.source.unpersist()
        return channel_reports, rejected

    def _plan_snapshots(self, metrics: BatchMetrics) -> None:
        try:
            self.snapshots().after_batch(metrics)
        except Exception:  # a snapshot shortens a recovery; its failure must not stop the stream
            log.exception("snapshot planning after batch %d failed; the history stays complete", metrics.batch_id)

    def _publish(self, metrics: BatchMetrics) -> None:
        self.last_metrics = metrics
        self.metrics_outlet.publish(metrics)
        if self.on_metrics is not None:
            self.on_metrics(metrics)
