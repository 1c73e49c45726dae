"""The adaptive policy: recov-guarantee and the Peak Avoidance Protocol on crafted series."""

from __future__ import annotations

import pytest

from elasticity.snapshots import (
    AdaptiveOptions,
    AdaptivePolicy,
    AdaptiveState,
    Backlog,
    RecoveryOptions,
    RecoveryTracker,
)
from tests.unit.snapshots.observations import batch, run, taken_at

# Fast enough that only the rule under test can snapshot.
FAST = RecoveryOptions(restore_bytes_per_s=1e12, fold_entries_per_s=1e9, replay_records_per_s=1e9)


def _period_already_done(options: AdaptiveOptions) -> AdaptivePolicy:
    """A policy whose current (very long) period has its snapshot: only recov-guarantee can fire."""
    tracker = RecoveryTracker.start(options.recovery)
    return AdaptivePolicy(options, AdaptiveState(tracker=tracker, period_start_s=0.0, period_done=True))


def test_recov_guarantee_fires_at_the_batch_whose_next_chance_would_pass_the_bound():
    options = AdaptiveOptions(max_recovery_s=3.0, period_s=1e6, recovery=RecoveryOptions(fold_entries_per_s=1_000))
    policy = _period_already_done(options)
    growth = [100 * (b + 1) for b in range(10)]  # changelog entries of batch b
    decisions = [policy.decide(batch(b, float(b), entries=e)) for b, e in enumerate(growth)]
    # Folded after batch b: 100, 300, 600, 1000, 1500, 2100, 2800 entries; at the next chance one more
    # changelog like b's: 2100 + 600 = 2700 entries (2.7 s) at b = 5, 2800 + 700 = 3500 (3.5 s) at b = 6.
    # After that snapshot: 800 + 900 + 1000 folded and 1000 more = 3.7 s at b = 9.
    assert taken_at(decisions) == [6, 9]
    assert {decisions[b].rule for b in (6, 9)} == {"recovery"}
    assert decisions[6].reason == "recovery would reach 3.5 s > 3.0 s before the next chance"
    assert decisions[6].recovery.total_s == 0.0
    assert decisions[5].recovery.total_s == pytest.approx(2.1)
    assert all(d.recovery.total_s <= 3.0 for d in decisions)
    assert [d.rule for d in decisions[7:9]] == ["period_done"] * 2


def test_recov_guarantee_matches_an_independent_count_on_a_longer_series():
    options = AdaptiveOptions(max_recovery_s=2.0, period_s=1e6, recovery=RecoveryOptions(fold_entries_per_s=500))
    growth = [37 * (b % 7) + 11 * (b % 3) for b in range(60)]
    policy = _period_already_done(options)
    decisions = [policy.decide(batch(b, float(b), entries=e)) for b, e in enumerate(growth)]
    expected, folded = [], 0
    for b, entries in enumerate(growth):
        folded += entries
        if (folded + entries) / 500 > 2.0:
            expected.append(b)
            folded = 0
    assert len(expected) > 3
    assert taken_at(decisions) == expected


def test_recov_guarantee_counts_the_snapshot_to_restore_and_the_batch_in_flight():
    recovery = RecoveryOptions(restore_bytes_per_s=1e6, fold_entries_per_s=1_000, replay_records_per_s=1_000)
    options = AdaptiveOptions(max_recovery_s=3.0, period_s=1e6, recovery=recovery)
    policy = _period_already_done(options)
    policy.state = policy.state.model_copy(update={"tracker": policy.state.tracker.after_snapshot(1_000_000)})
    first = policy.decide(batch(0, 0.0, records=1_000, entries=400, state_bytes=1_000_000))
    # Next chance: restore 1 MB (1 s) + fold 800 entries (0.8 s) + replay 1000 records (1 s) = 2.8 s.
    assert (first.take, first.signals["recovery_next_s"]) == (False, pytest.approx(2.8))
    assert first.recovery.total_s == pytest.approx(1.0 + 0.4 + 1.0)
    second = policy.decide(batch(1, 1.0, records=1_000, entries=400, state_bytes=1_000_000))
    # 1 s + 1.2 s + 1 s = 3.2 s; without the restore or the replay term it would be 2.2 s.
    assert second.rule == "recovery"
    assert second.reason == "recovery would reach 3.2 s > 3.0 s before the next chance"
    assert second.recovery.total_s == pytest.approx(1.0 + 1.0)


def test_peak_avoidance_defers_during_the_peak_and_snapshots_at_the_trough():
    policy = AdaptivePolicy(AdaptiveOptions(period_s=10.0, recovery=FAST))
    coverage = [100] * 10 + [400, 600, 300, 150, 80, 90, 95, 100, 100, 100]
    decisions = run(policy, coverage)
    assert taken_at(decisions) == [0, 15]
    assert [d.rule for d in decisions[10:16]] == ["peak", "peak", "peak", "falling", "falling", "trough"]
    # t = 10: the window (0, 10] holds nine batches of 100 and this 400: baseline 130.
    assert decisions[10].reason == "deferred: coverage 3.1× baseline (400 vs 130 records)"
    assert decisions[10].signals["baseline"] == pytest.approx(130.0)
    assert decisions[13].signals["icr"] == pytest.approx(-150.0)
    assert decisions[15].reason.startswith("trough: ICR turned +")
    assert {d.rule for d in decisions[16:]} == {"period_done"}


def test_a_period_that_starts_low_and_steady_snapshots_at_its_first_batch():
    decisions = run(AdaptivePolicy(AdaptiveOptions(period_s=5.0, recovery=FAST)), [100] * 16)
    assert taken_at(decisions) == [0, 5, 10, 15]
    assert {decisions[i].rule for i in (0, 5, 10, 15)} == {"low"}


def test_coverage_falling_through_a_whole_period_snapshots_when_it_ends():
    decisions = run(AdaptivePolicy(AdaptiveOptions(period_s=10.0, recovery=FAST)), [2_000 - 50 * t for t in range(30)])
    assert taken_at(decisions) == [0, 20]
    assert {d.rule for d in decisions[10:20]} == {"falling"}
    assert decisions[20].rule == "period_end"
    assert decisions[20].reason.startswith("period ended while coverage still falling")
    # The overrun's snapshot starts the next period: nothing before t = 30.
    assert {d.rule for d in decisions[21:]} == {"period_done"}


def test_a_peak_past_the_period_end_stays_deferred_until_the_recovery_bound():
    recovery = RecoveryOptions(fold_entries_per_s=1_000, replay_records_per_s=1e9)
    policy = AdaptivePolicy(AdaptiveOptions(max_recovery_s=3.05, period_s=5.0, recovery=recovery))
    decisions = run(policy, [100 * (t + 1) for t in range(40)], entries=100)
    # Batch 0's snapshot holds its changelog; after batch b, 100 b entries, 100 (b + 1) at the next chance
    # (plus a few microseconds of replay): 3.0 s at b = 29, 3.1 s at b = 30.
    assert taken_at(decisions) == [0, 30]
    assert {d.rule for d in decisions[5:30]} == {"peak"}
    assert "past the period's end" not in decisions[9].reason
    assert decisions[10].reason.startswith("deferred past the period's end: coverage")
    assert decisions[30].rule == "recovery"


def test_a_bound_no_snapshot_can_keep_leaves_the_decision_to_the_period():
    # Replay dominates: 3100 records in flight take 3.1 s whatever is snapshotted.
    recovery = RecoveryOptions(fold_entries_per_s=1e9, replay_records_per_s=1_000)
    policy = AdaptivePolicy(AdaptiveOptions(max_recovery_s=3.0, period_s=5.0, recovery=recovery))
    decisions = run(policy, [100 * (t + 1) for t in range(40)])
    assert taken_at(decisions) == [0]
    assert decisions[30].rule == "peak"
    assert decisions[30].reason.startswith("bound out of reach (recovery 3.1 s, 3.1 s even after a snapshot > 3.0 s)")


def test_max_interval_caps_a_deferral():
    options = AdaptiveOptions(period_s=5.0, max_interval_s=12.0, recovery=FAST)
    decisions = run(AdaptivePolicy(options), [100 * (t + 1) for t in range(30)])
    assert taken_at(decisions) == [0, 12, 24]
    assert decisions[12].rule == "max_interval"


def test_state_round_trips_through_json_and_the_run_continues_identically():
    coverage = [100] * 10 + [400, 600, 300, 150, 80, 90, 95, 100] * 3
    options = AdaptiveOptions(period_s=7.0, recovery=RecoveryOptions(fold_entries_per_s=500))
    whole = AdaptivePolicy(options)
    expected = [whole.decide(batch(i, float(i), records=r, entries=40, fold_s=0.05)) for i, r in enumerate(coverage)]
    first = AdaptivePolicy(options)
    got = [first.decide(batch(i, float(i), records=r, entries=40, fold_s=0.05)) for i, r in enumerate(coverage[:15])]
    resumed = AdaptivePolicy(options, AdaptiveState.from_json(first.state.to_json()))
    assert resumed.state == first.state
    got += [
        resumed.decide(batch(i, float(i), records=r, entries=40, fold_s=0.05))
        for i, r in enumerate(coverage)
        if i >= 15
    ]
    assert got == expected


def test_out_of_reach_the_part_a_snapshot_removes_is_still_kept_within_the_bound():
    # A fixed 1 s of every recovery (a fresh worker's start) puts a 0.5 s bound out of reach;
    # folding 1,000 entries/s, the changelogs a snapshot removes pass 0.5 s after ~5 batches of 100.
    recovery = RecoveryOptions(fold_entries_per_s=1_000, replay_records_per_s=1e9, fixed_s=1.0)
    policy = AdaptivePolicy(AdaptiveOptions(max_recovery_s=0.5, period_s=1000.0, recovery=recovery))
    decisions = run(policy, [100] * 20, entries=100)
    taken = taken_at(decisions)
    assert [d.rule for d in decisions if d.take][1:] == ["recovery"] * (len(taken) - 1)
    assert len(taken) >= 3
    assert all(d.recovery.fold_s <= 0.5 + 1e-9 for d in decisions)
    assert "a snapshot removes would pass it" in decisions[taken[1]].reason


@pytest.mark.parametrize(("min_gain_fraction", "expected"), [(0.1, [9, 19]), (0.0, [0, 5, 10, 15])])
def test_a_large_state_that_a_trickle_touches_is_not_rewritten_every_period(min_gain_fraction, expected):
    # Restoring the 1 MB state takes 1 s; each batch's 10 changed entries add 0.01 s of fold. A
    # snapshot after batch b takes 0.01 * (b + 1 - last snapshot) s off the recovery: a tenth of
    # its own restore only from the tenth batch after the last one on.
    recovery = RecoveryOptions(restore_bytes_per_s=1e6, fold_entries_per_s=1_000, replay_records_per_s=1e9)
    options = AdaptiveOptions(max_recovery_s=30.0, period_s=5.0, recovery=recovery, min_gain_fraction=min_gain_fraction)
    tracker = RecoveryTracker.start(recovery, Backlog(snapshot_bytes=1_000_000))
    policy = AdaptivePolicy(options, AdaptiveState(tracker=tracker))
    decisions = [policy.decide(batch(b, float(b), records=100, entries=10, state_bytes=1_000_000)) for b in range(20)]
    assert taken_at(decisions) == expected
    if min_gain_fraction:
        assert decisions[5].rule == "small_gain"
        assert (
            decisions[5].reason
            == "a snapshot would take 0.060 s off the recovery, less than 0.1 of its own 1.00 s restore"
        )
        assert {decisions[b].rule for b in expected} == {"low"}


def test_a_new_estimate_of_the_states_bytes_is_no_reason_to_snapshot():
    # The last snapshot was counted at 40 bytes an entry, the state now at 32 (the driver measured
    # a written snapshot): restoring a snapshot now looks 0.25 s shorter, but nothing changed.
    recovery = RecoveryOptions(restore_bytes_per_s=1e6, fold_entries_per_s=1_000, replay_records_per_s=1e9)
    options = AdaptiveOptions(max_recovery_s=30.0, period_s=5.0, recovery=recovery)
    tracker = RecoveryTracker.start(recovery, Backlog(snapshot_bytes=1_250_000))
    policy = AdaptivePolicy(options, AdaptiveState(tracker=tracker))
    decisions = [policy.decide(batch(b, float(b), records=100, entries=10, state_bytes=1_000_000)) for b in range(10)]
    assert taken_at(decisions) == [9]
    assert decisions[0].rule == "small_gain"
