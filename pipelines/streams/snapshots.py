"""Channel snapshots, decided and written by the stream's driver (seed 003 on the real stream).

After each committed batch the driver turns every channel's report into a `BatchObservation`
(its input records = the coverage and the replay, the changelog it wrote, its state size, the
time its commit and its task took) and asks the stream's `SnapshotPlanner`. A channel told to
snapshot is queued for `SnapshotWriter`, a thread of the driver that folds the channel's
durable history up to that batch into a snapshot (`elasticity.state.compaction`) while the
executors run the next batches: no batch waits for a snapshot, and exactly-once is untouched
(a snapshot is a fold of records already durable; it appears atomically or not at all). The
writer folds and encodes without the history lock and takes it only to publish, so a rescale
waits at most for a publish, never for a fold (at 1e7 keys a fold took 0.7–1.7 s).

Rebuilds the executors report (restore and fold times of a working set read back from history,
and a fresh worker's start apart from them) teach the policies their restore rate and fixed part.
The learned rates are kept in the elastic folder (`RATES_DOCUMENT`), so a restarted driver, the
moment a recovery is most likely to come again, predicts with them instead of the priors.
Migrations and snapshot publishes never overlap: the runner holds `paused()` while it migrates,
a fold in progress waits between its steps until the migration ends, and a folded snapshot whose
batch version is gone (its channel dropped by that rescale) is not published. A channel's policy outlives a rescale that
keeps the channel (the keys a migration moves show in its state size from the next batch on);
a new channel's policy starts from what its history holds.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from elasticity.snapshots import Backlog, BatchObservation, LearnedRates, RestoreObservation, backlog_in_history
from elasticity.snapshots.planner import SnapshotOptions, SnapshotPlanner
from elasticity.state import FileHistory, Location
from elasticity.state.backend import channel_dir_name
from elasticity.state.compaction import batch_version, fold_snapshot, publish_snapshot
from elasticity.state.files import CorruptFile
from pipelines.streams.metrics import BatchMetrics, ChannelMetrics, SnapshotRecord

log = logging.getLogger(__name__)

_DEFAULT_ENTRY_BYTES = 40.0
"""Arrow bytes per state entry assumed until a snapshot of the channel is measured."""

RATES_DOCUMENT = "recovery-rates.json"
"""In the elastic folder: every channel's learned recovery rates (`LearnedRates`)."""

SAVE_RATES_EVERY_S = 10.0
"""The learned rates are written at most this often (and at once after a rebuild taught them)."""


@dataclass(frozen=True)
class SnapshotJob:
    channel: int
    batch_id: int
    rule: str


class SnapshotWriter:
    """A driver thread that writes queued channel snapshots from the durable history."""

    def __init__(self, elastic_root: str, keep_snapshots: int, fence_check: Callable[[], None] | None) -> None:
        self._channels = Location.of(elastic_root).child("channels")
        self._keep = keep_snapshots
        self._fence_check = fence_check
        self.lock = threading.Lock()
        """Held while a snapshot is published; a migration holds it to keep snapshots out."""
        self._jobs: queue.Queue[SnapshotJob | None] = queue.Queue()
        self._written: list[SnapshotRecord] = []
        self._written_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="esp-snapshots", daemon=True)
        self._thread.start()

    def history(self, channel: int) -> FileHistory:
        return FileHistory(self._channels.child(channel_dir_name(channel)))

    def submit(self, job: SnapshotJob) -> None:
        self._jobs.put(job)

    def take_written(self) -> list[SnapshotRecord]:
        """Snapshots written since the last call."""
        with self._written_lock:
            written, self._written = self._written, []
        return written

    def drain(self, timeout_s: float = 60.0) -> None:
        """Wait until every queued snapshot is written (tests, and a clean stop)."""
        deadline = time.monotonic() + timeout_s
        while self._jobs.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self, timeout_s: float = 30.0) -> None:
        self._jobs.put(None)
        self._thread.join(timeout_s)

    def _wait_while_migrating(self) -> None:
        """Returns once no migration holds the history (a fold's step then takes no core from it)."""
        with self.lock:
            pass

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                self._write(job)
            except Exception:  # a snapshot is an optimization: the history stays complete without it
                log.exception("snapshot of channel %s at batch %s failed", job.channel if job else "?", job)
            finally:
                self._jobs.task_done()

    def _write(self, job: SnapshotJob) -> None:
        history = self.history(job.channel)
        self._wait_while_migrating()
        version = batch_version(history, job.batch_id)
        if version is None:  # the channel is gone, or never wrote this batch
            return
        try:
            # Outside the lock: a migration that starts now waits only for a publish, not a fold.
            folded = fold_snapshot(history, version, between_steps=self._wait_while_migrating)
        except (OSError, CorruptFile):
            if batch_version(history, job.batch_id) is None:
                return  # a migration dropped the channel while its files were read
            raise
        if folded is None:
            return
        with self.lock:
            written = publish_snapshot(history, folded, self._keep, self._fence_check)
        if written is not None:
            record = SnapshotRecord(
                channel=job.channel,
                batch_id=job.batch_id,
                entries=written.entries,
                bytes=written.bytes,
                changelogs_folded=written.changelogs_folded,
                write_ms=written.seconds * 1000,
                rule=job.rule,
            )
            with self._written_lock:
                self._written.append(record)


class ChannelSnapshots:
    """The stream's snapshot policy, fed each batch's channel reports, and its writer."""

    def __init__(
        self, options: SnapshotOptions, elastic_root: str, fence_check: Callable[[], None] | None = None
    ) -> None:
        self.options = options
        self.writer = SnapshotWriter(elastic_root, options.keep_snapshots, fence_check)
        self._root = Location.of(elastic_root)
        self.planner = SnapshotPlanner(options, self._backlog_of, load_rates(self._root))
        self._entry_bytes: dict[int, float] = {}
        self._rates_saved_at: float | None = None

    def _state_bytes(self, channel: int, entries: int) -> int:
        return int(entries * self._entry_bytes.get(channel, _DEFAULT_ENTRY_BYTES))

    def _backlog_of(self, channel: int) -> Backlog:
        """What a channel's history holds when its policy starts (driver start, a new channel)."""
        history = self.writer.history(channel)
        snapshots = history.snapshot_versions()
        entries = history.read_snapshot(max(snapshots)).num_rows if snapshots else 0
        return backlog_in_history(history, self._state_bytes(channel, entries))

    def after_batch(self, metrics: BatchMetrics) -> None:
        """Decide each channel's snapshot after this committed batch; note the decisions and the
        snapshots written since the last batch in `metrics`."""
        for written in self.writer.take_written():
            if written.entries:
                self._entry_bytes[written.channel] = written.bytes / written.entries
            self.planner.observe_written(written.channel, written.batch_id, written.bytes)
            metrics.snapshots.append(written)
        self.planner.keep_only(c.channel for c in metrics.per_channel)
        rebuilt = [r for r in metrics.per_channel if r.rebuild is not None]
        for report in rebuilt:
            self.planner.observe_restore(report.channel, _restore_of(report))
        reports = {r.channel: r for r in metrics.per_channel}
        observations = {channel: self._observation(metrics, r) for channel, r in reports.items()}
        for channel, decision in self.planner.decide(observations).items():
            report = reports[channel]
            report.snapshot_rule = decision.rule
            report.predicted_recovery_s = decision.recovery.total_s
            if decision.take:
                self.writer.submit(SnapshotJob(channel, metrics.batch_id, decision.rule))
        self._save_rates(force=bool(rebuilt))

    def _save_rates(self, force: bool) -> None:
        now = time.monotonic()
        if not force and self._rates_saved_at is not None and now - self._rates_saved_at < SAVE_RATES_EVERY_S:
            return
        try:
            self._root.publish_bytes(RATES_DOCUMENT, self.planner.learned().model_dump_json().encode())
        except OSError:  # the rates are an optimization: a stream never fails for them
            log.warning("could not keep the learned recovery rates in %s", self._root.file(RATES_DOCUMENT))
        self._rates_saved_at = now

    def _observation(self, metrics: BatchMetrics, report: ChannelMetrics) -> BatchObservation:
        return BatchObservation(
            batch_id=metrics.batch_id,
            time_s=metrics.wall_time,
            records=report.records,
            changelog_entries=report.keys_in,
            state_bytes=self._state_bytes(report.channel, report.state_keys),
            fold_s=report.apply_ms / 1000 if report.apply_ms is not None else None,
            process_s=_processing_s(report) if report.apply_ms is not None else None,
        )

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No snapshot is written inside this block (a migration runs in it)."""
        with self.writer.lock:
            yield

    def close(self) -> None:
        self.writer.close()


def load_rates(root: Location) -> LearnedRates | None:
    """The rates a previous driver learned (None: none kept, or unreadable: start from the priors)."""
    if not root.exists(RATES_DOCUMENT):
        return None
    try:
        return LearnedRates.model_validate_json(root.read_bytes(RATES_DOCUMENT))
    except (CorruptFile, ValueError) as error:
        log.warning("ignoring the learned recovery rates in %s: %s", root.file(RATES_DOCUMENT), error)
        return None


def _restore_of(report: ChannelMetrics) -> RestoreObservation:
    rebuild = report.rebuild
    assert rebuild is not None
    return RestoreObservation(
        snapshot_bytes=rebuild.snapshot_bytes,
        seconds=rebuild.restore_ms / 1000,
        fixed_s=rebuild.fixed_ms / 1000 if rebuild.fixed_ms is not None else None,
        fold_entries=rebuild.changelog_entries,
        fold_s=rebuild.fold_ms / 1000,
    )


def _processing_s(report: ChannelMetrics) -> float:
    """The task's time on its records: what a replay of them repeats. A rebuild in the task and a
    fresh worker's start are the recovery's other parts, learned apart."""
    other_ms = report.open_ms + (report.warmup_ms or 0.0)
    return max(report.proc_ms - other_ms, 0.0) / 1000
