"""The driver side of an elastic stream: one Structured Streaming query whose `foreachBatch`
routes each micro-batch through the elastic keyed stage, writes results exactly once, and
applies rescale requests at batch boundaries.

Exactly-once: Spark's checkpoint fixes each batch's offsets before it runs; the results and
bronze tables are overwritten per batch id; channel state is versioned by batch id (a replay
is a no-op). The Kafka results and dead-letter topics are at-least-once (a replayed batch
publishes again; records are keyed so consumers can keep the last value).

This module keeps the stream's lifecycle (lease, checkpoint check, start, stop, the query swap for
a new records cap) and the batch loop; its collaborators do the rest: `stage_runtime` (one per
elastic stage of the job: its layout, rescale requests, migrator, snapshots), `topics` (the Kafka
topics made ready), `sinks` (a batch's table and topic writes), `stage_calls` (what a stage is
called with), `rescaling` (a pending rescale at the batch boundary), `cap_switch` (the records cap:
admission control's and the per-channel one) and `reporting` (a batch's metrics and their producer).

A job with several elastic stages runs them in order within each batch, each under its own
committed layout; each stage applies its own pending rescale at the batch's start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from elasticity.layout import Layout
from elasticity.lease import Lease, acquire, ensure_free
from elasticity.migration import Migrator
from elasticity.migration.registry import LayoutRegistry
from elasticity.state import Location, uris
from pipelines import kafka_io
from pipelines.dead_letters import split_counting_rejected
from pipelines.elastic_stage import StageSpec
from pipelines.settings import ExecutorScalingSettings
from pipelines.spark_session import warm_python_workers
from pipelines.spark_threads import run_concurrently
from pipelines.streams.admission import AdmissionGate, forget_unstarted_batch
from pipelines.streams.cap_switch import CapSwitch
from pipelines.streams.control import ControlChannel
from pipelines.streams.executors import FollowingExecutors
from pipelines.streams.files import CheckpointMismatch, StreamFiles, checkpoint_mismatch
from pipelines.streams.jobs import BatchPlan, JobLogic, StageRun, job_logic
from pipelines.streams.metrics import BatchMetrics
from pipelines.streams.reporting import BatchContext, batch_metrics
from pipelines.streams.rescaling import BatchBoundaryRescale, channels_asked
from pipelines.streams.sinks import BatchSinks
from pipelines.streams.snapshots import ChannelSnapshots
from pipelines.streams.spec import StreamSpec
from pipelines.streams.stage_calls import StageCalls
from pipelines.streams.stage_runtime import StageRuntime
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
    """The first stage's metrics of the last batch (each stage keeps its own: `stages`)."""
    _lease: Lease | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _query_lock: threading.Lock = field(default_factory=threading.Lock)

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
        self.executors = FollowingExecutors.of(self.spark, self.executor_scaling)
        self.stages = [
            StageRuntime(self.spark, self.spec, name, channels, self._executor_target)
            for name, channels in self.logic.stage_channels()
        ]
        self.retention = TableRetention(self.spark, self.spec, self.logic.result_key_columns)
        self.admission = AdmissionGate(self.spec.admission, self.spec.control_dir) if self.spec.admission else None
        self.caps = CapSwitch(
            self.admission,
            self.spec.checkpoint,
            self.spec.input_topic,
            self._next_batch_cap,
            adjustable=self.admission is not None or self.spec.max_records_per_channel is not None,
        )
        self.sinks = BatchSinks(self.spec, self.logic)

    # -- the first stage's parts (a one-stage stream's only ones) ------------------------------

    @property
    def first(self) -> StageRuntime:
        return self.stages[0]

    @property
    def registry(self) -> LayoutRegistry:
        return self.first.registry

    @property
    def control(self) -> ControlChannel:
        return self.first.control

    @property
    def rescaling(self) -> BatchBoundaryRescale:
        return self.first.rescaling

    @property
    def stage_calls(self) -> StageCalls:
        return self.first.calls

    @property
    def stage(self) -> StageSpec:
        return self.first.stage

    def migrator(self) -> Migrator:
        """The first stage's migrator (`StageRuntime.migrator`)."""
        return self.first.migrator()

    def snapshots(self) -> ChannelSnapshots:
        """The first stage's snapshots (`StageRuntime.snapshots`)."""
        return self.first.snapshots()

    # -- lifecycle ---------------------------------------------------------------------------

    def prepare(self) -> Layout:
        """Check the input topic (create it if the spec says how), create output topics, commit the
        first layout (or recover)."""
        prepare_topics(self.spec, [runtime.name for runtime in self.stages])
        Location.of(self.spec.elastic_root).ensure()
        self._take_lease()
        try:
            for runtime in self.stages:
                recovered = runtime.prepare()
                if recovered.action != "nothing":
                    log.warning("stage %s: recovered an interrupted rescale: %s", runtime.name, recovered)
            self.check_checkpoint()
            self.retention.recover()
        except BaseException:
            self._release_lease()
            raise
        return self.registry.committed()

    def _take_lease(self) -> None:
        """One writer per stream: LeaseHeld (naming the holder) if another process writes it."""
        if self._lease is None:
            self._lease = acquire(self.spec.elastic_root, f"stream driver of {self.spec.name}", self.spec.lease_ttl_s)
            for runtime in self.stages:
                runtime.fence_with(self._lease.fence)

    def _release_lease(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def check_checkpoint(self) -> None:
        """Refuse to start when the checkpoint and any stage's channel state cannot both be right."""
        newest_planned = StreamFiles(self.spec).newest_planned_batch()
        for runtime in self.stages:
            problem = checkpoint_mismatch(self.spec.checkpoint, newest_planned, runtime.applied_batches())
            if problem is not None:
                where = "" if len(self.stages) == 1 else f" (stage {runtime.name})"
                raise CheckpointMismatch(f"stream {self.spec.name}{where}: {problem}")

    def start(self) -> StreamingQuery:
        self.prepare()
        channels = self.total_channels()
        warmed_s = warm_python_workers(self.spark, channels)
        if warmed_s is not None:
            log.info("stream %s: %d Python workers started in %.2f s", self.spec.name, channels, warmed_s)
        self.query = self._start_query()
        if self.caps.adjustable:
            threading.Thread(target=self._swap_on_cap_change, name=f"{self.spec.name}-caps", daemon=True).start()
        return self.query

    def _start_query(self) -> StreamingQuery:
        self.caps.query_cap = self._next_batch_cap(self.registry.committed().n_channels)
        source = kafka_io.read_stream(self.spark, self.spec.kafka, self.spec.input_topic, self.caps.query_cap)
        return (
            source.writeStream.queryName(self.spec.name)
            .foreachBatch(self.process_batch)
            .option("checkpointLocation", uris.spark_path(self.spec.checkpoint))
            .trigger(processingTime=f"{self.spec.trigger_seconds} seconds")
            .start()
        )

    def _records_per_batch(self, channels: int) -> int | None:
        """The tightest of the configured cap, the per-channel cap for `channels` of the first stage
        and admission control's (None: no cap)."""
        per_channel = self.spec.max_records_per_channel
        caps = [
            self.spec.max_offsets_per_trigger,
            per_channel * channels if per_channel is not None else None,
            self.admission.cap_records if self.admission else None,
        ]
        present = [cap for cap in caps if cap is not None]
        return min(present) if present else None

    def _next_batch_cap(self, channels: int) -> int | None:
        """The cap the next batch should be planned under, after a batch on `channels` channels: that
        of the layout a waiting rescale request asks for (the next batch applies it: a scale-out's
        first batch would otherwise admit only the old channels' records), else of `channels`."""
        asked = channels_asked(self.first.control, self.registry.committed())
        return self._records_per_batch(channels if asked is None else asked)

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
        for runtime in self.stages:
            runtime.close()
        self.retention.close()  # no batch runs now: an unpublished staging is dropped
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
                    lambda b: any(r.rescaling.channels_holding(r.registry.committed(), b) for r in self.stages),
                )
                self.caps.refusing.clear()
                self.caps.new_query = True  # before the query starts: its first batch reads it
                self.query = self._start_query()
            self.caps.restart_ms = (time.perf_counter() - started) * 1000
            replanned = "no batch planned under the old cap" if forgotten is None else f"batch {forgotten} replanned"
            log.warning(
                "records cap: query restarted with %s records per batch in %.0f ms (%s)",
                self.caps.query_cap,
                self.caps.restart_ms,
                replanned,
            )
        finally:
            self.caps.refusing.clear()
            self.caps.swapping.clear()

    # -- one micro-batch ---------------------------------------------------------------------

    def process_batch(self, raw: DataFrame, batch_id: int) -> None:
        if self._stopping.is_set() or self.caps.refusing.is_set():
            # Nothing of this batch has happened yet; Spark replays it on the next start (or,
            # for a new cap, plans it again: forget_unstarted_batch).
            raise StopRequested(f"stream {self.spec.name} is stopping before batch {batch_id}")
        started = time.perf_counter()
        contexts = [BatchContext(batch_id, started, runtime.registry.committed()) for runtime in self.stages]
        for runtime, context in zip(self.stages, contexts, strict=True):
            # The horizontal barrier: a pending rescale is applied before the batch routes a record.
            context.rescale = runtime.rescaling.apply_pending(batch_id)
            context.layout = runtime.registry.routing_layout()
        contexts[0].phase_ms["rescale"] = (time.perf_counter() - started) * 1000
        executors_target = self._follow_executors(sum(context.layout.n_channels for context in contexts))
        # Before the batch writes anything: swap in a compaction staged in the background
        # (quick), then begin staging the next one if due (off this batch's time).
        started = time.perf_counter()
        if self.retention.publish_ready():
            context.phase_ms["compact"] = (time.perf_counter() - started) * 1000
        self.retention.start_if_due(batch_id)
        raw = raw.persist()
        try:
            metrics, later = self._run_batch(raw, contexts)
        finally:
            raw.unpersist()
        self._note_executors(metrics, executors_target)
        for runtime, stage_metrics in zip(self.stages, [metrics, *later], strict=True):
            self._plan_snapshots(runtime, stage_metrics)
        self.caps.after_batch(metrics)
        self._publish(metrics, later)

    def later_layouts(self) -> dict[str, Layout]:
        """Each later stage's committed layout, by stage (empty for a one-stage job)."""
        return {runtime.name: runtime.registry.committed() for runtime in self.stages[1:]}

    def total_channels(self) -> int:
        """Channels of every stage's committed layout: the task slots the stream's batches use."""
        return sum(runtime.registry.committed().n_channels for runtime in self.stages)

    def _executor_target(self, channels: int) -> int | None:
        """Executors `channels` channels get (None: executors do not follow channels here)."""
        return self.executor_scaling.executors_for(channels) if self.executors is not None else None

    def _follow_executors(self, channels: int) -> int | None:
        """Before the batch runs a task: the executors the batch's `channels` (every stage's) need asked
        for, the surplus released (those that served the fewest channels last batch); the target asked."""
        if self.executors is None:
            return None
        served = self.last_metrics.served_by_executor() if self.last_metrics is not None else Counter()
        try:
            return self.executors.reconcile(channels, served).target
        except Exception:  # executors follow at best effort: the batch runs on those it has
            log.exception("asking for the executors of %d channels failed", channels)
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

    def _run_batch(self, raw: DataFrame, contexts: list[BatchContext]) -> tuple[BatchMetrics, list[BatchMetrics]]:
        """The batch run through every stage; the first stage's metrics (with the batch's phases,
        dead letters and late rows) and each later stage's."""
        context = contexts[0]
        parsed = self.logic.parse(raw)
        try:
            split = split_counting_rejected(parsed)
            good = split.good
            plan = self.logic.plan(good, context.batch_id)
            if self.spec.archive_input or plan.late is not None:
                # Cached only for several readers: filling the cache cost a 500k-line batch
                # ~1 s, more than parsing the cached raw rows again (rejected rows are rare).
                parsed.persist()
            actions = {
                "late": lambda: self.sinks.write_late(plan.late, context.batch_id),
                "stage": lambda: self._run_stages(plan, raw, contexts),
            }
            if self.spec.archive_input:
                actions["archive"] = lambda: self.sinks.archive(good, context.batch_id)
            outputs, phase_ms = run_concurrently(actions)
            plan.finish()
            started = time.perf_counter()
            dead_letters = split.rejected_count()
            if dead_letters:
                self.sinks.write_dead_letters(split.rejected(), context.batch_id)
            phase_ms["dead_letters"] = (time.perf_counter() - started) * 1000
        finally:
            parsed.unpersist()
        stage_runs, rejected_by_stages = outputs["stage"]
        metrics = batch_metrics(self.spec.name, context, stage_runs[0].reports, dead_letters)
        metrics.late_records = outputs["late"] + rejected_by_stages
        metrics.phase_ms = {**context.phase_ms, **phase_ms}
        metrics.stage_ms = stage_runs[0].wall_ms
        later = [
            batch_metrics(self.spec.name, stage_context, run.reports, 0, runtime.name)
            for runtime, stage_context, run in zip(self.stages[1:], contexts[1:], stage_runs[1:], strict=True)
        ]
        for stage_metrics, run in zip(later, stage_runs[1:], strict=True):
            stage_metrics.stage_ms = run.wall_ms
        return metrics, later

    def _run_stages(self, plan: BatchPlan, raw: DataFrame, contexts: list[BatchContext]) -> tuple[list[StageRun], int]:
        """Run the elastic stages in order on the plan's input (and each stage's probes), write the last
        stage's results (and rows any operator rejected) exactly once per batch id; each stage's run
        and the rejected rows' count.

        A stage before the last is computed by a job of its own and cached, and the next stage reads
        the cache: computed again, it would replay its batch (correct, by the replay contract, but
        its time twice), and computed inside the next stage's job, it could run in tasks that are
        not its channels' (`_operator_task`)."""
        batch_id = contexts[0].batch_id
        runs: list[StageRun] = []
        try:
            for index, (runtime, context) in enumerate(zip(self.stages, contexts, strict=True)):
                call = runtime.calls.call(raw, context.layout, runtime.stage, batch_id)
                run = self.logic.run_stage(index, plan, call, runs[-1].output if runs else None)
                runs.append(run)
                if index < len(self.stages) - 1:
                    started = time.perf_counter()
                    run.output.source.persist().count()
                    run.wall_ms = (time.perf_counter() - started) * 1000
                elif self.spec.results_to_kafka:
                    run.output.source.persist()
            return self._write_stage_outputs(runs, batch_id)
        finally:
            for run in runs:
                run.output.source.unpersist()

    def _write_stage_outputs(self, runs: list[StageRun], batch_id: int) -> tuple[list[StageRun], int]:
        """Write the last stage's results and every stage's rejected rows; read each stage's reports."""
        last = runs[-1]
        # The Parquet write computes the last stage (state is updated once, by this job); the Kafka
        # copy then reads the cached rows.
        started = time.perf_counter()
        self.sinks.write_results(last.output.results, batch_id)
        if len(runs) > 1:
            last.wall_ms = (time.perf_counter() - started) * 1000
        if self.spec.results_to_kafka:
            self.sinks.publish_results(last.output.results)
        for runtime, run in zip(self.stages, runs, strict=True):
            run.reports = runtime.calls.reports_of(run.call)
        rejecting = [run for run in runs if run.rejected_records]
        if rejecting:
            # Read again only when some were (a recomputation if not cached: the replay contract).
            rejected_rows = reduce(DataFrame.unionByName, [run.output.rejected() for run in rejecting])
            self.sinks.write_rejected(rejected_rows, batch_id)
        return runs, sum(run.rejected_records for run in runs)

    def _plan_snapshots(self, runtime: StageRuntime, metrics: BatchMetrics) -> None:
        try:
            runtime.snapshots().after_batch(metrics)
        except Exception:  # a snapshot shortens a recovery; its failure must not stop the stream
            log.exception(
                "snapshot planning of stage %s after batch %d failed; the history stays complete",
                runtime.name,
                metrics.batch_id,
            )

    def _publish(self, metrics: BatchMetrics, later: list[BatchMetrics]) -> None:
        self.last_metrics = metrics
        for runtime, stage_metrics in zip(self.stages, [metrics, *later], strict=True):
            runtime.last_metrics = stage_metrics
            runtime.outlet.publish(stage_metrics)
        if self.on_metrics is not None:
            self.on_metrics(metrics)
