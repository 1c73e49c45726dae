"""The recovery-time model: hand-computed predictions and the online rates."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from elasticity.snapshots import (
    Backlog,
    LearnedRates,
    RateEstimate,
    RecoveryOptions,
    RecoveryRates,
    RecoveryTracker,
    RestoreObservation,
    backlog_in_history,
)
from elasticity.state.history import MemoryHistory
from elasticity.state.records import Version, entries_table
from tests.unit.snapshots.observations import batch

OPTIONS = RecoveryOptions(
    smoothing=0.5, restore_bytes_per_s=10e6, fold_entries_per_s=1_000, replay_records_per_s=500, fixed_s=0.2
)


def test_prediction_adds_restore_fold_replay_and_the_fixed_part():
    tracker = RecoveryTracker.start(OPTIONS, Backlog(snapshot_bytes=20_000_000, changelogs=3, changelog_entries=1_500))
    predicted = tracker.predict(in_flight_records=250, options=OPTIONS)
    # 20 MB at 10 MB/s, 1500 entries at 1000/s, 250 records at 500/s, plus 0.2 s.
    assert (predicted.restore_s, predicted.fold_s, predicted.replay_s) == pytest.approx((2.0, 1.5, 0.5))
    assert predicted.total_s == pytest.approx(4.2)
    assert predicted.model_dump()["total_s"] == pytest.approx(4.2)


def test_a_batch_adds_its_changelog_and_a_snapshot_clears_the_backlog():
    tracker = RecoveryTracker.start(OPTIONS)
    tracker = tracker.after_batch(batch(0, 0.0, entries=400), OPTIONS).after_batch(batch(1, 1.0, entries=600), OPTIONS)
    assert (tracker.backlog.changelogs, tracker.backlog.changelog_entries) == (2, 1_000)
    assert tracker.predict(0, OPTIONS).fold_s == pytest.approx(1.0)
    cleared = tracker.after_snapshot(5_000_000)
    assert cleared.backlog == Backlog(snapshot_bytes=5_000_000)
    assert cleared.predict(0, OPTIONS).total_s == pytest.approx(0.2 + 0.5)


def test_the_first_measurement_replaces_the_prior_then_means_are_weighted():
    tracker = RecoveryTracker.start(OPTIONS)
    tracker = tracker.after_batch(batch(0, 0.0, entries=2_000, fold_s=0.5), OPTIONS)
    assert tracker.rates.fold.per_s == pytest.approx(4_000)
    tracker = tracker.after_batch(batch(1, 1.0, entries=1_000, fold_s=0.5), OPTIONS)
    # Weighted means with smoothing 0.5: (1500 entries) / (0.5 s).
    assert tracker.rates.fold.per_s == pytest.approx(3_000)
    assert tracker.rates.fold.samples == 2


def test_rates_are_ratios_of_means_so_a_tiny_slow_batch_barely_moves_them():
    rate = RateEstimate.prior(1.0).learned(10_000, 1.0, 0.5).learned(3, 0.1, 0.5)
    # A mean of ratios would give (10000 + 30) / 2 = 5015 records/s.
    assert rate.per_s == pytest.approx(5_001.5 / 0.55)


def test_observations_without_amount_or_time_teach_nothing():
    tracker = RecoveryTracker.start(OPTIONS)
    learned = tracker.after_batch(batch(0, 0.0, records=0, entries=0, fold_s=0.3, process_s=0.0), OPTIONS)
    assert learned.rates == tracker.rates


def test_replay_and_restore_rates_are_learned_from_processing_and_restores():
    tracker = RecoveryTracker.start(OPTIONS)
    tracker = tracker.after_batch(batch(0, 0.0, records=3_000, process_s=1.5), OPTIONS)
    tracker = tracker.after_restore(RestoreObservation(snapshot_bytes=8_000_000, seconds=2.0), OPTIONS)
    assert tracker.rates.replay.per_s == pytest.approx(2_000)
    assert tracker.rates.restore.per_s == pytest.approx(4_000_000)
    assert tracker.predict(1_000, OPTIONS, Backlog(snapshot_bytes=4_000_000)).total_s == pytest.approx(0.2 + 1 + 0.5)


def test_options_reject_a_zero_rate_and_a_smoothing_outside_0_1():
    with pytest.raises(ValidationError):
        RecoveryOptions(fold_entries_per_s=0)
    with pytest.raises(ValidationError):
        RecoveryOptions(smoothing=1.5)


def _changelog(rows: int):
    return entries_table(list(range(rows)), [f"k{i}" for i in range(rows)], [b"v"] * rows)


def test_the_backlog_of_a_durable_history_is_what_follows_its_newest_snapshot():
    history = MemoryHistory()
    assert backlog_in_history(history, snapshot_bytes=999) == Backlog()
    for batch_id, rows in enumerate([3, 5, 7]):
        history.write_changelog(Version(batch_id, 0), _changelog(rows))
    assert backlog_in_history(history, snapshot_bytes=999).changelog_entries == 15
    history.write_snapshot(Version(1, 0), _changelog(8))
    history.write_changelog(Version(2, 1), _changelog(2))  # a migration after batch 2
    backlog = backlog_in_history(history, snapshot_bytes=4_096)
    assert (backlog.snapshot_bytes, backlog.changelogs, backlog.changelog_entries) == (4_096, 2, 9)
    assert backlog.changelog_bytes == _changelog(7).nbytes + _changelog(2).nbytes


def test_a_fresh_workers_start_is_the_fixed_part_not_a_slow_restore():
    tracker = RecoveryTracker.start(OPTIONS)
    # A fresh worker spent 0.9 s starting, then restored 1 MB in 0.02 s (50 MB/s).
    tracker = tracker.after_restore(RestoreObservation(snapshot_bytes=1_000_000, seconds=0.02, fixed_s=0.9), OPTIONS)
    predicted = tracker.predict(0, OPTIONS, Backlog(snapshot_bytes=10_000_000))
    # Counted per byte, the start would make a 10 MB snapshot take 9.2 s to restore.
    assert predicted.restore_s == pytest.approx(0.2)
    assert predicted.fixed_s == pytest.approx(0.9)
    # A warm worker (a rescale receiver) teaches the restore rate but not the fixed part.
    warm = tracker.after_restore(RestoreObservation(snapshot_bytes=1_000_000, seconds=0.02), OPTIONS)
    assert warm.rates.fixed == tracker.rates.fixed


def test_learned_rates_round_trip_and_a_new_channel_borrows_the_best_learned():
    seen = RecoveryTracker.start(OPTIONS).after_restore(
        RestoreObservation(snapshot_bytes=1_000_000, seconds=0.5, fixed_s=0.3), OPTIONS
    )
    learned = LearnedRates(channels={0: RecoveryRates.priors(OPTIONS), 3: seen.rates})
    again = LearnedRates.model_validate_json(learned.model_dump_json())
    assert again == learned
    assert again.for_channel(0) == RecoveryRates.priors(OPTIONS)
    assert again.for_channel(7) == seen.rates  # more samples than channel 0's priors
    assert LearnedRates().for_channel(0) is None


def test_a_rebuilds_fold_rate_replaces_the_commits_proxy():
    # Commits applied 1,000 entries/s (they also write the changelog durably) ...
    tracker = RecoveryTracker.start(OPTIONS).after_batch(batch(0, 0.0, entries=1_000, fold_s=1.0), OPTIONS)
    backlog = Backlog(changelog_entries=6_000)
    assert tracker.predict(0, OPTIONS, backlog).fold_s == pytest.approx(6.0)
    # ... a rebuild folded 3,000 entries/s: a recovery's fold is predicted at that rate from now on.
    rebuilt = tracker.after_restore(
        RestoreObservation(snapshot_bytes=0, seconds=0.0, fold_entries=9_000, fold_s=3.0), OPTIONS
    )
    assert rebuilt.predict(0, OPTIONS, backlog).fold_s == pytest.approx(2.0)
    later = rebuilt.after_batch(batch(1, 1.0, entries=1_000, fold_s=5.0), OPTIONS)
    assert later.predict(0, OPTIONS, backlog).fold_s == pytest.approx(2.0)
