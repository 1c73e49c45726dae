"""The rescale-pause benchmark: esp's online donate/collect against Spark's offline state
repartition, at several state sizes, on the real broker and the one Spark session.

For each state size K, each system runs the same script on its own topic:

1. **warm**: K distinct words (each exactly once, `words_per_line` to a line) are produced and
   consumed, then a trickle of lines over those words runs for `warm_batches` batches (so
   executors' caches are in their steady state), then the trickle stops and the query catches
   up — it is now idle between batches with K keys of state on N channels/partitions;
2. **rescale** with data waiting:
   - esp: a rescale request goes to the running stream's control channel, then a chunk of
     `chunk_lines` lines is produced; the next micro-batch migrates (donate → vertical barrier
     → collect → commit) and processes the chunk under the new layout;
   - native: stop the query (between batches), produce the same chunk, offline-repartition the
     checkpoint to N' partitions, start the query again; its first batch processes the chunk;
3. **pause** = from the moment the rescale begins (esp: the micro-batch's trigger starts;
   native: `stop()` is called) to the first batch committed under the new layout (the
   `commits/<id>` file of the checkpoint). Both include processing that one chunk, so the
   normal time of one such batch (the next chunk, under the new layout) is reported next to it;
4. **correctness**: another chunk, then the results table must equal the batch oracle of the
   whole topic.

Moved state: esp reports keys and bytes donated, and the moved fraction over the ideal
|N'-N|/max(N,N'); the native repartition rewrites every key (fraction 1.0 by construction;
the rows of the repartitioned state are counted with Spark's state reader to show it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession

from benchmarks.spark_runs import (
    NATIVE_OUTPUTS,
    STATE_LOAD_WORDS_PER_LINE,
    Trickle,
    check_results,
    commit_times,
    covering_lines,
    last_commit,
    machine,
    new_topic,
    produce,
    trigger_start_s,
    wait_caught_up,
    wait_for_batches,
)
from elasticity.state.kinds import StoreKind
from pipelines.native import NativeSpec, NativeWordCount, last_committed_batch

if TYPE_CHECKING:
    from pipelines.streams.metrics import BatchMetrics

Step = Callable[[str], None]


@dataclass(frozen=True)
class RescaleOptions:
    """How the rescale benchmark runs; every option has a default."""

    keys: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    """State sizes: distinct words held before the rescale."""
    from_channels: int = 4
    """Channels (esp) / state partitions (native) before the rescale."""
    to_channels: int = 5
    """After the rescale."""
    topic_partitions: int = 4
    """Partitions of each input topic."""
    words_per_line: int = STATE_LOAD_WORDS_PER_LINE
    """Words per warm-up line (K/words_per_line lines cover the K keys)."""
    trigger_seconds: float = 0.5
    """Micro-batch trigger interval of both queries."""
    warm_batches: int = 4
    """Trickle batches after the warm-up, before the measurement."""
    trickle_lines_per_s: float = 200.0
    """Rate of the warm trickle."""
    chunk_lines: int = 200
    """Lines of the chunk the first batch after the rescale (and the next one) processes."""
    timeout_s: float = 1800.0
    """Upper bound for any single wait (warm-up of the largest size included)."""
    repetitions: int = 1
    """Runs of each system per size; the figures are those of each system's median-pause run
    (one pause moves by ±20% between runs on a busy 2-core machine)."""
    workdir: str = ".esp/bench/rescale"
    """Folder for the queries' checkpoints, state and results."""
    store_kind: StoreKind = "rocks"
    """The elastic stream's channel store kind (`elasticity.state.kinds`)."""


@dataclass
class SizeResult:
    keys: int
    esp_runs: list[dict[str, Any]] = field(default_factory=list)
    native_runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def esp(self) -> dict[str, Any]:
        return _median_run(self.esp_runs)

    @property
    def native(self) -> dict[str, Any]:
        return _median_run(self.native_runs)

    def summary(self) -> dict[str, Any]:
        esp_pause, native_pause = self.esp.get("pause_s"), self.native.get("pause_s")
        moved = self.esp.get("moved_fraction")
        ideal = self.esp.get("ideal_fraction")
        esp_excess = _excess(esp_pause, self.esp.get("normal_batch_s"))
        native_excess = _excess(native_pause, self.native.get("normal_batch_s"))
        return {
            "keys": self.keys,
            "esp_pause_s": esp_pause,
            "native_pause_s": native_pause,
            "pause_ratio": native_pause / esp_pause if esp_pause and native_pause else None,
            "esp_moved_fraction": moved,
            "ideal_fraction": ideal,
            "moved_over_ideal": moved / ideal if moved is not None and ideal else None,
            "native_rewritten_fraction": self.native.get("rewritten_fraction"),
            # The pause minus one normal batch of the same chunk: the delay the rescale itself adds.
            "esp_excess_pause_s": esp_excess,
            "native_excess_pause_s": native_excess,
            "esp_migration_s": (self.esp.get("migration_ms") or 0) / 1000 or None,
            "native_repartition_s": self.native.get("repartition_s"),
            "esp_correct": _all_correct(self.esp_runs),
            "native_correct": _all_correct(self.native_runs),
            "esp_pauses_s": [run.get("pause_s") for run in self.esp_runs],
            "native_pauses_s": [run.get("pause_s") for run in self.native_runs],
            # Every run's migration, and the snapshots written before its rescaling batch (the load's
            # and the warm-up's, which share the cores with it), in run order.
            "esp_migrations_s": [_seconds(run.get("migration_ms")) for run in self.esp_runs],
            "esp_snapshots_before_rescale": [_snapshots_before(run) for run in self.esp_runs],
        }

    def details(self) -> dict[str, Any]:
        """Each system's median run, then every run in run order (the medians are among them)."""
        return {
            "keys": self.keys,
            "esp": self.esp,
            "native": self.native,
            "esp_runs": self.esp_runs,
            "native_runs": self.native_runs,
        }


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose pause is the median (the lower one of an even count: a real run)."""
    timed = sorted((run for run in runs if run.get("pause_s") is not None), key=lambda run: run["pause_s"])
    if not timed:
        return runs[0] if runs else {}
    return timed[(len(timed) - 1) // 2]


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000


def _snapshots_before(run: dict[str, Any]) -> int | None:
    rescaled = run.get("batch_id")
    if rescaled is None:
        return None
    return sum(1 for s in run.get("snapshots") or [] if s["reported_with_batch"] < rescaled)


def _all_correct(runs: list[dict[str, Any]]) -> bool | None:
    checks = [run.get("correctness", {}).get("ok") for run in runs]
    return None if not checks or None in checks else all(checks)


def _excess(pause: float | None, normal: float | None) -> float | None:
    return None if pause is None or normal is None else max(0.0, pause - normal)


def _trigger_start(query, batch_id: int) -> float | None:
    """Wall time at which the query's trigger of `batch_id` began (from its progress)."""
    for progress in query.recentProgress:
        if progress["batchId"] == batch_id:
            return trigger_start_s(progress)
    return None


def _warm(
    checkpoint: str, bootstrap: str, topic: str, keys: int, options: RescaleOptions, is_alive, step: Step
) -> None:
    wait_caught_up(checkpoint, bootstrap, topic, options.timeout_s, is_alive)
    step("warm: state loaded")
    trickle = Trickle(bootstrap, topic, keys, options.trickle_lines_per_s).start()
    try:
        wait_for_batches(checkpoint, last_commit(checkpoint), options.warm_batches, options.timeout_s, is_alive)
    finally:
        trickle.stop()
    wait_caught_up(checkpoint, bootstrap, topic, options.timeout_s, is_alive)
    step("warm: steady batches done")


def _chunk(keys: int, lines: int, salt: int) -> list[bytes]:
    """`lines` lines of 8 existing words each (different per salt)."""
    return [
        " ".join(f"k{(i * 7919 + j * 104729 + salt * 15485863) % keys}" for j in range(8)).encode()
        for i in range(lines)
    ]


# -- esp ------------------------------------------------------------------------------------


def _batch_of(metrics: dict, request_id: str, timeout_s: float, is_alive) -> int:
    """The id of the batch that applied rescale `request_id` (once its metrics are out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and is_alive():
        for batch_id, m in sorted(metrics.items()):
            if m.rescale and m.rescale.get("request_id") == request_id:
                return batch_id
        time.sleep(0.05)
    raise TimeoutError(f"no batch reported rescale {request_id}")


def run_esp(spark: SparkSession, bootstrap: str, keys: int, options: RescaleOptions, step: Step) -> dict[str, Any]:
    """Warm the elastic word count to `keys` keys, rescale it online, check the results."""
    from pipelines.streams.control import RescaleRequest, RescaleTarget
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec

    topic = new_topic(bootstrap, f"bench-esp-{keys}", options.topic_partitions)
    produce(bootstrap, topic, covering_lines(keys, options.words_per_line))
    # The archive and the results topic are not part of a rescale; `esp bench throughput`
    # shows what they cost per batch.
    spec = StreamSpec(
        name=f"bench-esp-{keys}",
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(Path(options.workdir) / topic),
        channels=options.from_channels,
        trigger_seconds=options.trigger_seconds,
        store_kind=options.store_kind,
        **NATIVE_OUTPUTS,
    )
    metrics: dict[int, BatchMetrics] = {}
    stream = ElasticStream(spark, spec, on_metrics=lambda m: metrics.__setitem__(m.batch_id, m))
    stream.start()
    checkpoint = stream.spec.checkpoint
    alive = lambda: stream.query is not None and stream.query.isActive  # noqa: E731
    try:
        _warm(checkpoint, bootstrap, topic, keys, options, alive, step)
        request = RescaleRequest(target=RescaleTarget(op="scale_to", channels=options.to_channels), reason="bench")
        stream.control.request(request)
        produce(bootstrap, topic, _chunk(keys, options.chunk_lines, 1))
        result = stream.control.wait_for_result(request.request_id, options.timeout_s)
        if not result.committed or result.report is None:
            raise RuntimeError(f"the rescale failed: {result.error}")
        report = result.report
        rescaled = _batch_of(metrics, request.request_id, options.timeout_s, alive)
        wait_for_batches(checkpoint, rescaled - 1, 1, options.timeout_s, alive)
        step("esp: rescaled")
        after = last_commit(checkpoint)
        produce(bootstrap, topic, _chunk(keys, options.chunk_lines, 2))
        wait_for_batches(checkpoint, after, 1, options.timeout_s, alive)
        wait_caught_up(checkpoint, bootstrap, topic, options.timeout_s, alive)
        commits = commit_times(checkpoint)
        trigger = _trigger_start(stream.query, rescaled)
        normal = min(b for b in commits if b > rescaled)
    finally:
        stream.stop()
    correctness = check_results(spark, stream.spec.results_table, bootstrap, topic)
    step("esp: checked")
    moved, total = report.keys_moved, report.keys_total or keys
    return {
        "topic": topic,
        "batch_id": rescaled,
        "pause_s": commits[rescaled] - trigger if trigger else None,
        "commit_gap_s": commits[rescaled] - commits[rescaled - 1],
        "batch_ms": metrics[rescaled].batch_ms,
        "migration_ms": report.total_ms,
        "phase_ms": report.phase_ms,
        "snapshot_wait_ms": result.snapshot_wait_ms,
        "normal_batch_ms": metrics[normal].batch_ms if normal in metrics else None,
        # Where each batch's time went (rescale = migration; the others run side by side).
        "batch_phase_ms": metrics[rescaled].phase_ms,
        "normal_batch_phase_ms": metrics[normal].phase_ms if normal in metrics else None,
        "normal_batch_s": commits[normal] - (_trigger_start(stream.query, normal) or commits[normal]),
        # Each channel's task in both batches: a working set rebuilt from history shows here.
        "channel_costs": _channel_costs(metrics[rescaled]),
        "normal_channel_costs": _channel_costs(metrics[normal]) if normal in metrics else None,
        # The driver's snapshots beside the batches: their folds share the machine's cores.
        "snapshots": _snapshots_written(metrics),
        "keys_total": total,
        "keys_moved": moved,
        "bytes_moved": report.bytes_moved,
        "moved_fraction": moved / total if total else None,
        "ideal_fraction": report.ideal_fraction,
        "channels": [report.channels_before, report.channels_after],
        "correctness": correctness.to_dict(),
    }


def _channel_costs(metrics: BatchMetrics) -> list[dict[str, Any]]:
    """Per channel of a batch: its task's time, the store's open, the commit's apply (after the
    durable write), and a rebuild from the durable history if the task's Python worker held no
    working copy of the channel."""
    return [
        {
            "channel": c.channel,
            "proc_ms": c.proc_ms,
            "open_ms": c.open_ms,
            "apply_ms": c.apply_ms,
            "state_keys": c.state_keys,
            "rebuilt_entries": (c.rebuild.snapshot_entries + c.rebuild.changelog_entries) if c.rebuild else 0,
            "rebuild_ms": (c.rebuild.restore_ms + c.rebuild.fold_ms) if c.rebuild else 0.0,
        }
        for c in sorted(metrics.per_channel, key=lambda c: c.channel)
    ]


def _snapshots_written(metrics: dict[int, BatchMetrics]) -> list[dict[str, Any]]:
    """Every snapshot the driver wrote during the run, with the batch that reported it."""
    return [
        {
            "reported_with_batch": batch_id,
            "channel": s.channel,
            "batch_id": s.batch_id,
            "entries": s.entries,
            "write_ms": s.write_ms,
            "rule": s.rule,
        }
        for batch_id, m in sorted(metrics.items())
        for s in m.snapshots
    ]


# -- native ---------------------------------------------------------------------------------


def _state_rows(spark: SparkSession, checkpoint: str, batch_id: int) -> int | None:
    """Rows in the aggregation's state as of `batch_id` (Spark's state data source)."""
    try:
        return spark.read.format("statestore").option("batchId", batch_id).load(checkpoint).count()
    except Exception:  # the reader is optional evidence; the pause does not depend on it
        return None


def run_native(spark: SparkSession, bootstrap: str, keys: int, options: RescaleOptions, step: Step) -> dict[str, Any]:
    """Warm the native word count to `keys` keys, stop → repartition → restart, check."""
    topic = new_topic(bootstrap, f"bench-native-{keys}", options.topic_partitions)
    produce(bootstrap, topic, covering_lines(keys, options.words_per_line))
    spec = NativeSpec(
        name=f"bench-native-{keys}",
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(Path(options.workdir) / topic),
        partitions=options.from_channels,
        trigger_seconds=options.trigger_seconds,
    )
    native = NativeWordCount(spark, spec)
    native.start()
    alive = lambda: native.query is not None and native.query.isActive  # noqa: E731
    try:
        _warm(spec.checkpoint, bootstrap, topic, keys, options, alive, step)
        before = last_committed_batch(spec.checkpoint)
        started = time.time()
        stop_attempts = native.stop_between_batches(options.timeout_s)
        stopped = time.time()
        last_old = last_committed_batch(spec.checkpoint)
        produce(bootstrap, topic, _chunk(keys, options.chunk_lines, 1))
        produced = time.time()
        native.repartition_state(options.to_channels)
        repartitioned = time.time()
        repartition_batch = last_committed_batch(spec.checkpoint)
        native.start()
        restarted = time.time()
        wait_for_batches(spec.checkpoint, repartition_batch, 1, options.timeout_s, alive)
        commits = commit_times(spec.checkpoint)
        first = min(b for b in commits if b > repartition_batch)
        step("native: rescaled")
        produce(bootstrap, topic, _chunk(keys, options.chunk_lines, 2))
        wait_for_batches(spec.checkpoint, first, 1, options.timeout_s, alive)
        wait_caught_up(spec.checkpoint, bootstrap, topic, options.timeout_s, alive)
        commits = commit_times(spec.checkpoint)
        normal = min(b for b in commits if b > first)
        normal_trigger = _trigger_start(native.query, normal)
    finally:
        native.stop()
    correctness = check_results(spark, spec.results_table, bootstrap, topic)
    rows_before = _state_rows(spark, spec.checkpoint, last_old)
    rows_after = _state_rows(spark, spec.checkpoint, repartition_batch)
    step("native: checked")
    return {
        "topic": topic,
        "batch_id": first,
        "pause_s": (commits[first] - started) - (produced - stopped),
        "commit_gap_s": commits[first] - commits[last_old] - (produced - stopped),
        "stop_s": stopped - started,
        "stop_attempts": stop_attempts,
        "repartition_s": repartitioned - produced,
        "restart_s": restarted - repartitioned,
        "first_batch_s": commits[first] - restarted,
        "normal_batch_s": commits[normal] - normal_trigger if normal_trigger else None,
        "batches_before": before,
        "repartition_batch": repartition_batch,
        "state_rows_before": rows_before,
        "state_rows_rewritten": rows_after,
        # Hash-mod repartitioning writes every partition anew: all state is rewritten.
        "rewritten_fraction": (rows_after / rows_before) if rows_before and rows_after is not None else 1.0,
        "partitions": [options.from_channels, options.to_channels],
        "correctness": correctness.to_dict(),
    }


def run_rescale_benchmark(
    spark: SparkSession, bootstrap: str, options: RescaleOptions, step: Step = lambda _: None
) -> dict[str, Any]:
    """Both systems at every size, one after the other on one Spark session; the results."""
    sizes = []
    for keys in options.keys:
        size = SizeResult(keys)
        for rep in range(options.repetitions):
            label = lambda s, k=keys, r=rep: step(f"{k:,} keys, run {r + 1} — {s}")  # noqa: E731
            systems = [(size.esp_runs, run_esp), (size.native_runs, run_native)]
            # Alternate which system goes first, so neither always follows the other's load.
            for runs, run in systems if rep % 2 == 0 else systems[::-1]:
                runs.append(run(spark, bootstrap, keys, options, label))
        sizes.append(size)
    return {
        "benchmark": "rescale",
        "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in options.__dict__.items()},
        "machine": machine(spark),
        "sizes": [s.summary() for s in sizes],
        "details": [s.details() for s in sizes],
    }


STEPS_PER_SIZE = 8
"""`step` calls per size and repetition, for progress bars: esp and native each report 2 warm-up steps, the
rescale and the check."""
