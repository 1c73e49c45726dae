"""A stream's snapshot planner: one policy per channel, started from the channel's history,
forgotten when a rescale removes the channel; the options a command line names."""

from __future__ import annotations

import pytest

from elasticity.snapshots import AdaptiveOptions, Backlog, FixedPeriodPolicy, RecoveryOptions
from elasticity.snapshots.planner import SnapshotOptions, SnapshotPlanner
from tests.unit.snapshots.observations import batch


def test_each_channel_starts_from_the_backlog_its_history_holds() -> None:
    asked: list[int] = []

    def backlog_of(channel: int) -> Backlog:
        asked.append(channel)
        # Channel 1's history already holds a long backlog: folding it would take 5 s.
        return Backlog(changelogs=50, changelog_entries=1_000_000 if channel == 1 else 0)

    planner = SnapshotPlanner(SnapshotOptions(), backlog_of)
    decisions = planner.decide({0: batch(0, 0.0, records=10, entries=10), 1: batch(0, 0.0, records=10, entries=10)})

    assert asked == [0, 1]
    assert decisions[0].rule != "recovery" and decisions[0].recovery.total_s < 0.01
    assert decisions[1].take and decisions[1].rule == "recovery"
    planner.decide({0: batch(1, 1.0), 1: batch(1, 1.0)})
    assert asked == [0, 1]  # once per channel


def test_a_removed_channel_is_forgotten_and_starts_again_from_its_history() -> None:
    asked: list[int] = []
    planner = SnapshotPlanner(SnapshotOptions(), lambda c: asked.append(c) or Backlog())
    planner.decide({0: batch(0, 0.0), 1: batch(0, 0.0)})
    planner.keep_only([0])
    assert planner.channels() == [0]
    planner.decide({0: batch(1, 1.0), 1: batch(1, 1.0)})
    assert asked == [0, 1, 1]


def test_the_fixed_policy_keeps_the_old_cadence_of_25_batches() -> None:
    options = SnapshotOptions.choose("fixed")
    planner = SnapshotPlanner(options, lambda c: Backlog())
    taken = [b for b in range(60) if planner.decide({0: batch(b, float(b))})[0].take]
    assert taken == [24, 49]
    assert isinstance(options.new_policy(Backlog()), FixedPeriodPolicy)


def test_choose_reads_the_options_a_command_line_names() -> None:
    assert SnapshotOptions.choose().adaptive.max_recovery_s == 3.0
    bounded = SnapshotOptions.choose("adaptive", max_recovery_s=0.5, period_s=4)
    assert (bounded.adaptive.max_recovery_s, bounded.adaptive.period_s) == (0.5, 4)
    assert SnapshotOptions.choose("fixed", period_s=14).fixed.every_s == 14
    with pytest.raises(ValueError, match="adaptive"):
        SnapshotOptions.choose("fixed", max_recovery_s=1.0)


def test_policies_start_from_rates_learned_before_and_hand_them_on() -> None:
    from elasticity.snapshots import LearnedRates, RestoreObservation

    options = SnapshotOptions.choose("fixed", period_s=1000)  # no snapshot: the backlog's restore stays
    first = SnapshotPlanner(options, lambda c: Backlog())
    first.decide({0: batch(0, 0.0)})
    first.observe_restore(0, RestoreObservation(snapshot_bytes=1_000_000, seconds=0.1, fixed_s=0.8))
    kept = LearnedRates.model_validate_json(first.learned().model_dump_json())

    # A restarted driver: channel 0 resumes its own rates, channel 1 (new) borrows them.
    again = SnapshotPlanner(options, lambda c: Backlog(snapshot_bytes=1_000_000), kept)
    decisions = again.decide({0: batch(1, 1.0, records=0, entries=0), 1: batch(1, 1.0, records=0, entries=0)})
    for channel in (0, 1):
        assert decisions[channel].recovery.fixed_s == pytest.approx(0.8)
        assert decisions[channel].recovery.restore_s == pytest.approx(0.1)
    # Without them the priors know no fixed part.
    fresh = SnapshotPlanner(options, lambda c: Backlog(snapshot_bytes=1_000_000))
    assert fresh.decide({0: batch(1, 1.0, records=0, entries=0)})[0].recovery.fixed_s == 0.0


def test_a_written_snapshot_counts_at_its_measured_size_not_the_estimate_it_was_decided_at() -> None:
    # Decided at 40 bytes an entry (2 MB: a 2 s restore), written at 32 (1.6 MB). Counted at the
    # estimate, the next batch's recovery (2 s + fold) would pass the 1.9 s bound while a snapshot
    # of the same state, now estimated at 1.6 MB, would not: a snapshot taken for nothing.
    recovery = RecoveryOptions(restore_bytes_per_s=1e6, fold_entries_per_s=1_000, replay_records_per_s=1e9)
    options = SnapshotOptions(adaptive=AdaptiveOptions(max_recovery_s=1.9, period_s=1e6, recovery=recovery))
    planner = SnapshotPlanner(options, lambda c: Backlog())
    first = planner.decide({0: batch(0, 0.0, records=100, entries=1_000, state_bytes=2_000_000)})[0]
    assert first.take
    planner.observe_written(0, 7, 100)  # not the newest decided snapshot: ignored
    planner.observe_written(0, 0, 1_600_000)
    after = planner.decide({0: batch(1, 1.0, records=100, entries=10, state_bytes=1_600_000)})[0]
    assert not after.take and after.rule != "recovery"
    assert after.recovery.restore_s == pytest.approx(1.6)
