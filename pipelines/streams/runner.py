"""The driver side of an elastic stream: one Structured Streaming query whose `foreachBatch`
routes each micro-batch through the elastic keyed stage, writes results exactly once, and
applies rescale requests at batch boundaries.

Exactly-once: Spark's checkpoint fixes each batch's offsets before it runs; the results and
bronze tables are overwritten per batch id; channel state is versioned by batch id (a replay
is a no-op). The Kafka results and dead-letter topics are at-least-once (a replayed batch
publishes again; records are keyed so consumers can keep the last value).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from elasticity.layout import Layout
from elasticity.lease import Lease, acquire, ensure_free
from elasticity.migration import Migrator, RecordedOutcome
from elasticity.migration.registry import LayoutRegistry
from elasticity.state import HistoryBackend, Int64Codec, Location, uris
from pipelines import kafka_io
from pipelines.dead_letters import rejected_count, split_counting_rejected, write_dead_letters
from pipelines.elastic_stage import ChannelReports, StageSpec, placement_labels
from pipelines.kafka_topics import TopicSpec, ensure_topics, require_topics, retention_configs
from pipelines.spark_session import warm_python_workers
from pipelines.spark_threads import run_concurrently
from pipelines.streams.admission import AdmissionGate, admitted_records, batch_outcome, forget_unstarted_batch
from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleResult, next_layout_of
from pipelines.streams.files import CheckpointMismatch, StreamFiles, checkpoint_mismatch
from pipelines.streams.jobs import BatchPlan, JobLogic, StageCall, job_logic
from pipelines.streams.metrics import METRICS_TOPIC_CONFIGS, BatchMetrics, ChannelMetrics
from pipelines.streams.metrics_publisher import MetricsPublisher
from pipelines.streams.snapshots import ChannelSnapshots
from pipelines.streams.spec import StreamSpec
from pipelines.streams.table_retention import TableRetention

log = logging.getLogger(__name__)


class StopRequested(RuntimeError):
    """Raised at a batch's start once a stop was asked: the query ends between two batches."""


@dataclass
class _BatchContext:
    batch_id: int
    started: float
    layout: Layout
    raw: DataFrame | None = None
    rescale: RescaleResult | None = None
    phase_ms: dict[str, float] = field(default_factory=dict)


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
    query: StreamingQuery | None = None
    last_metrics: BatchMetrics | None = None
    _labels: dict[int, list[int]] = field(default_factory=dict)
    _publisher: MetricsPublisher | None = None
    _migrator: Migrator | None = None
    _lease: Lease | None = None
    _reports: Any = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    # Admission control: batches refused while the query is swapped for one with a new cap.
    _refuse_batches: threading.Event = field(default_factory=threading.Event)
    _swapping: threading.Event = field(default_factory=threading.Event)
    _cap_changed: threading.Event = field(default_factory=threading.Event)
    _query_lock: threading.Lock = field(default_factory=threading.Lock)
    _last_restart_ms: float | None = None
    _capped_after_batch: int = -1
    _first_batch_of_new_query: bool = False
    _snapshots: ChannelSnapshots | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def ended_unasked(self) -> StreamingQuery | None:
        """The query if it ended without esp asking (a failure); None while it runs, or when it
        ended for a stop or for a new admission cap (the new query replaces it)."""
        query = self.query
        if query is None or self._stopping.is_set() or self._swapping.is_set() or query.isActive:
            return None
        # Checked again after reading isActive: a swap may have begun (and ended) in between.
        if self._stopping.is_set() or self._swapping.is_set() or self.query is not query:
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

    # -- lifecycle ---------------------------------------------------------------------------

    def prepare(self) -> Layout:
        """Check the input topic (create it if the spec says how), create output topics, commit the
        first layout (or recover)."""
        if self.spec.input_partitions is not None:
            topic = TopicSpec(name=self.spec.input_topic, partitions=self.spec.input_partitions)
            ensure_topics(self.spec.kafka, [topic])
        require_topics(self.spec.kafka, [self.spec.input_topic])
        ensure_topics(
            self.spec.kafka,
            [
                TopicSpec(
                    name=self.spec.results_topic,
                    partitions=4,
                    configs=retention_configs(self.spec.results_topic_retention_hours),
                ),
                TopicSpec(
                    name=self.spec.dead_letter_topic,
                    partitions=1,
                    configs=retention_configs(self.spec.dead_letter_retention_hours),
                ),
                TopicSpec(name=self.spec.metrics_topic, partitions=1, configs=METRICS_TOPIC_CONFIGS),
            ],
        )
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
            self._lease = acquire(self.spec.elastic_root, f"stream driver of {self.spec.name}")
            fence = self._lease.fence if self._lease is not None else None
            self.stage = dataclasses.replace(self.stage, fence=fence)
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
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None
        if self._snapshots is not None:
            self._snapshots.close()
            self._snapshots = None
        self.retention.close()  # no batch runs now: an unpublished staging is dropped
        if self._migrator is not None:
            self._migrator.backend.close()
            self._migrator = None
        self._release_lease()

    # -- one micro-batch ---------------------------------------------------------------------

    def process_batch(self, raw: DataFrame, batch_id: int) -> None:
        if self._stopping.is_set() or self._refuse_batches.is_set():
            # Nothing of this batch has happened yet; Spark replays it on the next start (or,
            # for a new cap, plans it again: forget_unstarted_batch).
            raise StopRequested(f"stream {self.spec.name} is stopping before batch {batch_id}")
        context = _BatchContext(batch_id, time.perf_counter(), self.registry.committed())
        context.rescale = self._apply_pending_rescale(batch_id)
        context.phase_ms["rescale"] = (time.perf_counter() - context.started) * 1000
        context.layout = self.registry.routing_layout()
        # Before the batch writes anything: swap in a compaction staged in the background
        # (quick), then begin staging the next one if due (off this batch's time).
        started = time.perf_counter()
        if self.retention.publish_ready():
            context.phase_ms["compact"] = (time.perf_counter() - started) * 1000
        self.retention.start_if_due(batch_id)
        context.raw = raw = raw.persist()
        try:
            metrics = self._run_batch(raw, context)
        finally:
            raw.unpersist()
        self._plan_snapshots(metrics)
        self._admit(metrics)
        self._publish(metrics)

    def _run_batch(self, raw: DataFrame, context: _BatchContext) -> BatchMetrics:
        parsed = self.logic.parse(raw)
        try:
            good, rejected, counted = split_counting_rejected(parsed)
            plan = self.logic.plan(good, context.batch_id)
            if self.spec.archive_input or plan.late is not None:
                # Cached only for several readers: filling the cache cost a 500k-line batch
                # ~1 s, more than parsing the cached raw rows again (rejected rows are rare).
                parsed.persist()
            actions = {
                "late": lambda: self._write_late(plan.late, context.batch_id),
                "stage": lambda: self._run_stage(plan, context),
            }
            if self.spec.archive_input:
                actions["archive"] = lambda: self._archive(good, context.batch_id)
            outputs, phase_ms = run_concurrently(actions)
            plan.finish()
            started = time.perf_counter()
            dead_letters = rejected_count(counted, rejected)
            if dead_letters:
                write_dead_letters(rejected, self.spec.kafka, self.spec.dead_letter_topic, context.batch_id)
            phase_ms["dead_letters"] = (time.perf_counter() - started) * 1000
        finally:
            parsed.unpersist()
        channel_reports, rejected_by_stage = outputs["stage"]
        metrics = self._metrics(context, channel_reports, dead_letters)
        metrics.late_records = outputs["late"] + rejected_by_stage
        metrics.phase_ms = {**context.phase_ms, **phase_ms}
        return metrics

    def _run_stage(self, plan: BatchPlan, context: _BatchContext) -> tuple[list[ChannelMetrics], int]:
        """Run the elastic stage on the plan's input and probes, write results (and rows an operator
        rejected) exactly once per batch id; each channel's report and the rejected rows' count."""
        reports = self._channel_reports()
        call = StageCall(
            raw=context.raw,
            layout=context.layout,
            labels=self._labels_for(context.layout.n_channels),
            stage=self.stage,
            batch_id=context.batch_id,
            previous_channels=self._previous_channels(context.layout),
            reports=reports,
            routing_tasks=self.spec.routing_tasks or self.spark.sparkContext.defaultParallelism,
        )
        output = self.logic.stage(plan, call)
        # The Parquet write computes the stage (state is updated once, by this job); the Kafka copy
        # then reads the cached rows.
        if self.spec.results_to_kafka:
            output.source.persist()
        try:
            output.results.write.mode("overwrite").parquet(
                uris.spark_path(f"{self.spec.results_table}/batch_id={context.batch_id}")
            )
            if self.spec.results_to_kafka:
                self._publish_results(output.results)
            channel_reports = [r for (b, _), r in sorted(reports.value.items()) if b == context.batch_id]
            rejected = sum(r.rejected_records for r in channel_reports)
            if rejected:
                # Read again only when some were (a recomputation if not cached: the replay contract).
                self._write_rejected(output.rejected, context.batch_id)
        finally:
            if self.spec.results_to_kafka:
                output.source.unpersist()
        return channel_reports, rejected

    def _write_rejected(self, rejected: DataFrame, batch_id: int) -> None:
        """Rows the operator rejected (late events...) kept in the rejected table per batch, with their
        reason (overwritten on replay): never dropped silently."""
        rejected.withColumn("batch_id", F.lit(batch_id)).write.mode("overwrite").parquet(
            uris.spark_path(f"{self.spec.rejected_table}/batch_id={batch_id}")
        )

    def _channel_reports(self):
        """The stream's accumulator of channel reports, emptied for the next batch (batches
        run one at a time, so one accumulator serves them all)."""
        if self._reports is None:
            self._reports = self.spark.sparkContext.accumulator({}, ChannelReports())
        else:
            self._reports.value = {}
        return self._reports

    def _write_late(self, late: DataFrame | None, batch_id: int) -> int:
        """Late rows are kept (per batch, overwritten on replay) and counted, never dropped silently."""
        if late is None:
            return 0
        late = late.persist()
        try:
            total = late.agg(F.sum("n").alias("n")).first().n or 0
            late.withColumn("batch_id", F.lit(batch_id)).write.mode("overwrite").parquet(
                uris.spark_path(f"{self.spec.late_table}/batch_id={batch_id}")
            )
            return int(total)
        finally:
            late.unpersist()

    def _archive(self, good: DataFrame, batch_id: int) -> None:
        bronze = self.logic.bronze(good).withColumn("batch_id", F.lit(batch_id))
        (
            bronze.write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy("date", "batch_id")
            .parquet(uris.spark_path(self.spec.bronze_table))
        )

    def _publish_results(self, rows: DataFrame) -> None:
        kafka_io.write_batch(
            rows,
            self.spec.kafka,
            self.spec.results_topic,
            key=F.col(self.logic.result_key),
            value=F.to_json(F.struct(*[F.col(c) for c in rows.columns])),
        )

    # -- admission control (seed 004) --------------------------------------------------------

    def _admit(self, metrics: BatchMetrics) -> None:
        """Decide the next batch's cap; a changed cap refuses later batches until the query is swapped."""
        metrics.query_restart_ms, self._last_restart_ms = self._last_restart_ms, None
        disturbed, self._first_batch_of_new_query = self._first_batch_of_new_query, False
        if self.admission is None:
            return
        admitted = admitted_records(self.spec.checkpoint, metrics.batch_id, self.spec.input_topic)
        metrics.admitted_records = admitted
        if admitted is None or disturbed:
            # The first batch of a new query pays its start-up (planning, cold caches): like a
            # window disturbed by a rescale, it is no evidence of the load. The cap holds.
            metrics.admission_cap = self.admission.cap_records
            return
        decision = self.admission.after_batch(batch_outcome(metrics, admitted))
        metrics.admission_cap, metrics.admission_rule = decision.cap_records, decision.rule
        if decision.changed:
            # Set before this batch returns, so the next one cannot begin under the old cap.
            self._capped_after_batch = metrics.batch_id
            self._refuse_batches.set()
            self._swapping.set()
            self._cap_changed.set()

    def _swap_on_cap_change(self) -> None:
        while not self._stopping.is_set():
            if self._cap_changed.wait(0.5):
                self._cap_changed.clear()
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
                    if committed is not None and committed >= self._capped_after_batch:
                        break
                    time.sleep(0.01)
                self.query.stop()
                forgotten = forget_unstarted_batch(
                    self.spec.checkpoint, lambda b: bool(self._channels_holding(self.registry.committed(), b))
                )
                self._refuse_batches.clear()
                self._first_batch_of_new_query = True  # before the query starts: its first batch reads it
                self.query = self._start_query()
            self._last_restart_ms = (time.perf_counter() - started) * 1000
            replanned = "no batch planned under the old cap" if forgotten is None else f"batch {forgotten} replanned"
            log.warning(
                "admission: query restarted with %s records per batch in %.0f ms (%s)",
                self._records_per_batch(),
                self._last_restart_ms,
                replanned,
            )
        finally:
            self._refuse_batches.clear()
            self._swapping.clear()

    # -- rescale at the batch boundary (the horizontal barrier) --------------------------------

    def migrator(self) -> Migrator:
        """The driver's migrator. It reads and writes channel state through the durable history
        only (`HistoryBackend`): the live working sets are in the executors' RocksDB, so opening
        RocksDB stores here would rebuild whole channels inside the pause; the history gives
        donate exactly the moved ranges, and executors apply the migration record by `sync()`.
        Keys are not counted here (that would fold every channel): the last batch's metrics
        already carry each channel's key count."""
        if self._migrator is None:
            backend = HistoryBackend(Int64Codec(), durable=self.spec.elastic_root)
            fence = self._lease.fence.check if self._lease is not None else None
            self._migrator = Migrator(
                Location.of(self.spec.elastic_root), backend, count_keys=False, max_workers=8, fence=fence
            )
        return self._migrator

    def _plan_snapshots(self, metrics: BatchMetrics) -> None:
        try:
            self.snapshots().after_batch(metrics)
        except Exception:  # a snapshot shortens a recovery; its failure must not stop the stream
            log.exception("snapshot planning after batch %d failed; the history stays complete", metrics.batch_id)

    def snapshots(self) -> ChannelSnapshots:
        """The stream's snapshot policy and writer (`pipelines.streams.snapshots`)."""
        if self._snapshots is None:
            fence = self._lease.fence.check if self._lease is not None else None
            self._snapshots = ChannelSnapshots(self.spec.snapshots, self.spec.elastic_root, fence)
        return self._snapshots

    def _apply_pending_rescale(self, batch_id: int) -> RescaleResult | None:
        request = self.control.take_request()
        if request is None:
            return None
        with self.snapshots().paused():  # a migration may drop a channel a snapshot is writing
            return self._rescale(request, batch_id)

    def _rescale(self, request: RescaleRequest, batch_id: int) -> RescaleResult | None:
        current = self.registry.committed()
        migrator = self.migrator()
        recorded = migrator.recorded_outcome(request.request_id, self.registry.next_epoch() - 1)
        if recorded is not None:
            # Taken before a crash that came after its migration ended: answer, never apply twice.
            return self._answer_recorded(request, recorded)
        if request.base_epoch is not None and request.base_epoch != current.epoch:
            return self._refuse(
                request,
                f"stale request: planned on layout epoch {request.base_epoch}, the stream is at {current.epoch}",
            )
        if holding := self._channels_holding(current, batch_id):
            # A replay after a crash mid-batch: these channels already applied this batch. A
            # migration now would move keys with and without its increments and the replay
            # would then skip or re-apply them per channel. The batch first completes under the
            # layout it began with; the request waits for the next boundary.
            log.warning(
                "rescale %s waits: batch %d is a replay that channels %s already applied",
                request.request_id,
                batch_id,
                holding,
            )
            return None
        started = time.perf_counter()
        try:
            # Epochs are never reused (a rolled-back one stays taken), so the planned layout
            # gets the registry's next epoch, whatever number its sender gave it.
            new = next_layout_of(request, current).renumbered(self.registry.next_epoch())
            report = migrator.migrate(new, request_id=request.request_id)
            report.keys_total = self._state_keys(current)
        except Exception as error:  # refused or failed: the stream keeps the committed layout
            if self.registry.pending() is not None:
                # "Failed" means rolled back: never rolled forward later by a recover(). A
                # failure after the commit point is finished instead, and answered as committed.
                migrator.rollback()
                recorded = migrator.recorded_outcome(request.request_id, self.registry.next_epoch() - 1)
                if recorded is not None and recorded.committed:
                    return self._answer_recorded(request, recorded)
            return self._refuse(request, str(error))
        result = RescaleResult(
            request_id=request.request_id,
            status="committed",
            reason=request.reason,
            pause_ms=(time.perf_counter() - started) * 1000,
            requested_at=request.requested_at,
            layout=new,
            report=report,
        )
        self.control.publish_result(result)
        return result

    def _refuse(self, request: RescaleRequest, error: str) -> RescaleResult:
        result = RescaleResult(
            request_id=request.request_id,
            status="failed",
            reason=request.reason,
            requested_at=request.requested_at,
            error=error,
        )
        self.control.publish_result(result)
        log.error("rescale %s failed: %s", request.request_id, error)
        return result

    def _answer_recorded(self, request: RescaleRequest, recorded: RecordedOutcome) -> RescaleResult:
        if not recorded.committed:
            return self._refuse(request, recorded.error or "rolled back")
        result = RescaleResult(
            request_id=request.request_id,
            status="committed",
            reason=request.reason,
            requested_at=request.requested_at,
            layout=self.registry.load(recorded.epoch),
            recovered=True,
        )
        self.control.publish_result(result)
        log.warning("rescale %s had committed before a restart; its outcome is published now", request.request_id)
        return result

    def _channels_holding(self, layout: Layout, batch_id: int) -> list[int]:
        """Channels of `layout` whose durable state already includes `batch_id` (a listing each)."""
        backend = self.migrator().backend
        return [channel for channel in layout.channels if backend.open(channel).is_committed(batch_id)]

    def _state_keys(self, layout: Layout) -> int | None:
        """Keys held under `layout`, from the last batch's per-channel metrics (None if unknown)."""
        last = self.last_metrics
        if last is None or last.epoch != layout.epoch:
            return None
        return sum(c.state_keys for c in last.per_channel)

    def _previous_channels(self, layout: Layout) -> list[int]:
        # `layout` is the committed one (the batch routes by it), so its predecessor is the registry's.
        previous = self.registry.previous()
        return list(previous.channels) if previous is not None else []

    def _labels_for(self, n: int) -> list[int]:
        if n not in self._labels:
            self._labels[n] = placement_labels(n)
        return self._labels[n]

    # -- metrics ---------------------------------------------------------------------------

    def _metrics(self, context: _BatchContext, reports: list[ChannelMetrics], rejected: int) -> BatchMetrics:
        per_channel = {c: ChannelMetrics(channel=c) for c in context.layout.channels}
        per_channel.update({report.channel: report for report in reports})
        elapsed = time.perf_counter() - context.started
        records = sum(c.records for c in per_channel.values())
        return BatchMetrics(
            stream=self.spec.name,
            batch_id=context.batch_id,
            epoch=context.layout.epoch,
            channels=context.layout.n_channels,
            wall_time=time.time(),
            input_records=records,
            rejected_records=rejected,
            batch_ms=elapsed * 1000,
            records_per_s=records / elapsed if elapsed > 0 else 0.0,
            per_channel=list(per_channel.values()),
            rescale=context.rescale.model_dump(mode="json") if context.rescale is not None else None,
        )

    def _publish(self, metrics: BatchMetrics) -> None:
        self.last_metrics = metrics
        if self._publisher is None:
            self._publisher = MetricsPublisher(self.spec.kafka, self.spec.metrics_topic, self.spec.name.encode())
        self._publisher.publish(metrics)  # a broker outage drops metrics, never the batch
        if self.on_metrics is not None:
            self.on_metrics(metrics)
