"""The driver's channel snapshots: decided from each batch's channel reports, written from the
durable history by a thread of the driver, reported with the next batch; held off while a
migration runs; never written into a channel a rescale dropped."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from elasticity.snapshots.planner import SnapshotOptions
from elasticity.state import FileHistory, Int64Codec, RocksBackend, Version
from pipelines.streams.metrics import BatchMetrics, ChannelMetrics, RebuildReport
from pipelines.streams.snapshots import ChannelSnapshots, SnapshotJob, SnapshotWriter


def _batch(backend: RocksBackend, channels: list[int], batch_id: int, keys: int = 40) -> BatchMetrics:
    reports = []
    for channel in channels:
        store = backend.open(channel)
        with store.begin(batch_id) as tx:
            for k in range(keys):
                tx.put(f"c{channel}k{k}", batch_id)
        reports.append(
            ChannelMetrics(channel, records=keys * 10, keys_in=keys, proc_ms=20.0, state_keys=len(store), apply_ms=1.0)
        )
    return BatchMetrics("s", batch_id, 1, len(channels), wall_time=float(batch_id), per_channel=reports)


def _history(tmp_path: Path, channel: int) -> FileHistory:
    return FileHistory.at(str(tmp_path / "durable" / "channels" / f"channel={channel}"))


def test_the_fixed_period_snapshots_each_channel_and_reports_it_with_the_next_batch(tmp_path: Path) -> None:
    backend = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "local"))
    snapshots = ChannelSnapshots(SnapshotOptions.choose("fixed", period_s=3), str(tmp_path / "durable"))
    try:
        for batch_id in range(5):
            metrics = _batch(backend, [0, 1], batch_id)
            snapshots.after_batch(metrics)
            snapshots.writer.drain()
            if batch_id == 3:
                assert [c.snapshot_rule for c in metrics.per_channel] == ["fixed_period", "fixed_period"]
            if batch_id == 4:
                assert sorted((s.channel, s.batch_id) for s in metrics.snapshots) == [(0, 3), (1, 3)]
                assert all(s.entries == 40 and s.rule == "fixed_period" for s in metrics.snapshots)
        assert [v.batch for v in _history(tmp_path, 0).snapshot_versions()] == [3]
    finally:
        snapshots.close()


def test_the_adaptive_policy_snapshots_when_the_recovery_bound_would_be_passed(tmp_path: Path) -> None:
    backend = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "local"))
    # Folding a changelog of 40 entries takes 0.1 s: the fifth would pass a 0.45 s bound.
    options = SnapshotOptions.choose("adaptive", max_recovery_s=0.45, period_s=1000)
    snapshots = ChannelSnapshots(options, str(tmp_path / "durable"))
    rules = []
    try:
        for batch_id in range(8):
            metrics = _batch(backend, [0], batch_id)
            metrics.per_channel[0].apply_ms = 100.0
            metrics.per_channel[0].proc_ms = 1.0
            snapshots.after_batch(metrics)
            snapshots.writer.drain()
            rules.append(metrics.per_channel[0].snapshot_rule)
            assert metrics.per_channel[0].predicted_recovery_s <= 0.45 + 1e-9
        assert "recovery" in rules
        assert _history(tmp_path, 0).snapshot_versions()
    finally:
        snapshots.close()


def test_a_rebuild_teaches_the_restore_rate(tmp_path: Path) -> None:
    backend = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "local"))
    snapshots = ChannelSnapshots(SnapshotOptions(), str(tmp_path / "durable"))
    try:
        metrics = _batch(backend, [0], 0)
        metrics.per_channel[0].rebuild = RebuildReport(100, 4_000_000, 2000.0, 0, 0.0)  # 2 MB/s
        snapshots.after_batch(metrics)
        policy = snapshots.planner._policy(0)  # noqa: SLF001 (what the policy learned)
        assert policy.state.tracker.rates.restore.per_s == 2_000_000
    finally:
        snapshots.close()


def test_no_snapshot_is_written_while_a_migration_holds_the_history(tmp_path: Path) -> None:
    backend = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "local"))
    snapshots = ChannelSnapshots(SnapshotOptions.choose("fixed", period_s=1), str(tmp_path / "durable"))
    try:
        _batch(backend, [0], 0)
        with snapshots.paused():
            metrics = _batch(backend, [0], 1)
            snapshots.after_batch(metrics)
            snapshots.after_batch(_batch(backend, [0], 2))
            time.sleep(0.3)
            assert _history(tmp_path, 0).snapshot_versions() == []
        snapshots.writer.drain()
        assert _history(tmp_path, 0).snapshot_versions()
    finally:
        snapshots.close()


class _GatedHistory(FileHistory):
    """A history whose changelog reads wait for a go-ahead: a fold caught in the middle."""

    def __init__(self, history: FileHistory, reading: threading.Event, go_on: threading.Event) -> None:
        super().__init__(history.base)
        self._reading, self._go_on = reading, go_on

    def read_changelog(self, version: Version) -> pa.Table:
        self._reading.set()
        assert self._go_on.wait(30)
        return super().read_changelog(version)


class _GatedWriter(SnapshotWriter):
    def __init__(self, elastic_root: str) -> None:
        self.reading, self.go_on = threading.Event(), threading.Event()
        super().__init__(elastic_root, keep_snapshots=2, fence_check=None)

    def history(self, channel: int) -> FileHistory:
        return _GatedHistory(super().history(channel), self.reading, self.go_on)


def test_a_migration_waits_for_no_snapshot_fold_and_the_fold_publishes_after_it(tmp_path: Path) -> None:
    backend = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "local"))
    for batch_id in range(3):
        _batch(backend, [0], batch_id)
    writer = _GatedWriter(str(tmp_path / "durable"))
    try:
        writer.submit(SnapshotJob(0, 2, "test"))
        assert writer.reading.wait(30)
        # A migration (ChannelSnapshots.paused) starts while the fold reads: it gets the lock at
        # once. Before, the writer held it through the whole fold (0.7-1.7 s at 1e7 keys).
        assert writer.lock.acquire(timeout=10), "the migration waited for a snapshot fold"
        try:
            writer.go_on.set()
            time.sleep(0.3)
            assert _history(tmp_path, 0).snapshot_versions() == []  # nothing published inside it
        finally:
            writer.lock.release()
        writer.drain()
        assert [v.batch for v in _history(tmp_path, 0).snapshot_versions()] == [2]
        assert [(w.channel, w.batch_id, w.entries) for w in writer.take_written()] == [(0, 2, 40)]
    finally:
        writer.close()


def test_a_fold_of_a_channel_a_migration_drops_midway_publishes_nothing_and_logs_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "local"))
    for batch_id in range(3):
        _batch(backend, [0, 1], batch_id)
    writer = _GatedWriter(str(tmp_path / "durable"))
    try:
        writer.submit(SnapshotJob(1, 2, "test"))
        assert writer.reading.wait(30)
        with caplog.at_level(logging.ERROR):
            with writer.lock:
                backend.drop(1)  # a scale-in removes channel 1 under the fold's feet
                writer.go_on.set()
            writer.drain()
        assert not (tmp_path / "durable" / "channels" / "channel=1").exists()
        assert writer.take_written() == []
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    finally:
        writer.close()


def test_a_queued_snapshot_of_a_channel_the_rescale_dropped_is_skipped(tmp_path: Path) -> None:
    backend = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "local"))
    snapshots = ChannelSnapshots(SnapshotOptions.choose("fixed", period_s=1), str(tmp_path / "durable"))
    try:
        with snapshots.paused():
            snapshots.after_batch(_batch(backend, [0, 1], 0))
            snapshots.after_batch(_batch(backend, [0, 1], 1))
            backend.drop(1)  # the migration removes channel 1 before the writer gets to it
        snapshots.writer.drain()
        assert not (tmp_path / "durable" / "channels" / "channel=1").exists()
        assert _history(tmp_path, 0).snapshot_versions()
    finally:
        snapshots.close()


def test_learned_rates_outlive_the_driver(tmp_path: Path) -> None:
    backend = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "local"))
    options = SnapshotOptions.choose("fixed", period_s=1000)
    first = ChannelSnapshots(options, str(tmp_path / "durable"))
    try:
        metrics = _batch(backend, [0], 0)
        # A fresh worker: 900 ms of start, then 4 MB restored in 100 ms.
        metrics.per_channel[0].rebuild = RebuildReport(100, 4_000_000, 100.0, 0, 0.0, fixed_ms=900.0)
        metrics.per_channel[0].warmup_ms = 900.0
        first.after_batch(metrics)
    finally:
        first.close()
    restarted = ChannelSnapshots(options, str(tmp_path / "durable"))
    try:
        rates = restarted.planner._policy(0).rates  # noqa: SLF001 (what the new driver starts from)
        assert rates.fixed.seconds == 0.9 and rates.restore.per_s == 40_000_000
    finally:
        restarted.close()


def test_a_damaged_rates_document_is_ignored(tmp_path: Path) -> None:
    from pipelines.streams.snapshots import RATES_DOCUMENT

    (tmp_path / "durable").mkdir()
    (tmp_path / "durable" / RATES_DOCUMENT).write_bytes(b"{not json")
    snapshots = ChannelSnapshots(SnapshotOptions(), str(tmp_path / "durable"))
    try:
        assert snapshots.planner._policy(0).rates.samples == 0  # noqa: SLF001 (the priors)
    finally:
        snapshots.close()


def test_the_replay_rate_leaves_out_the_rebuild_and_the_workers_start(tmp_path: Path) -> None:
    backend = RocksBackend(Int64Codec(), str(tmp_path / "durable"), str(tmp_path / "local"))
    snapshots = ChannelSnapshots(SnapshotOptions.choose("fixed", period_s=1000), str(tmp_path / "durable"))
    try:
        metrics = _batch(backend, [0], 0)  # 400 records
        report = metrics.per_channel[0]
        report.proc_ms, report.open_ms, report.warmup_ms = 1_400.0, 300.0, 900.0
        snapshots.after_batch(metrics)
        # 400 records in the 200 ms left, not in 1.4 s.
        assert snapshots.planner._policy(0).rates.replay.per_s == 2_000  # noqa: SLF001
    finally:
        snapshots.close()
