"""Properties of the adaptive policy on random series, against an independent recovery count."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticity.snapshots import AdaptiveOptions, AdaptivePolicy, RecoveryOptions
from tests.unit.snapshots.observations import batch

RESTORE, FOLD, REPLAY, FIXED = 50e6, 2_000.0, 5_000.0, 0.1
RECOVERY = RecoveryOptions(
    restore_bytes_per_s=RESTORE, fold_entries_per_s=FOLD, replay_records_per_s=REPLAY, fixed_s=FIXED
)

batches = st.lists(
    st.tuples(
        st.floats(0.1, 3.0),  # seconds since the previous batch
        st.integers(0, 5_000),  # records (coverage, replay)
        st.integers(0, 5_000),  # changelog entries
        st.integers(0, 100_000_000),  # state bytes
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(series=batches, period_s=st.floats(1.0, 20.0), max_recovery_s=st.floats(0.5, 6.0))
def test_recovery_passes_the_bound_by_at_most_one_batchs_growth(series, period_s, max_recovery_s):
    policy = AdaptivePolicy(AdaptiveOptions(max_recovery_s=max_recovery_s, period_s=period_s, recovery=RECOVERY))
    snapshot_bytes, folded, time_s = 0, 0, 0.0
    previous_recovery_s, previous_records = None, 0
    for b, (gap_s, records, entries, state_bytes) in enumerate(series):
        time_s += gap_s
        folded += entries
        now_s = FIXED + snapshot_bytes / RESTORE + folded / FOLD + records / REPLAY
        next_chance_s = now_s + entries / FOLD
        reachable = FIXED + state_bytes / RESTORE + entries / FOLD + records / REPLAY <= max_recovery_s
        decision = policy.decide(batch(b, time_s, records=records, entries=entries, state_bytes=state_bytes))

        if previous_recovery_s is not None:
            growth_s = entries / FOLD + max(0.0, (records - previous_records) / REPLAY)
            assert now_s <= max(max_recovery_s, previous_recovery_s) + growth_s + 1e-9
        if next_chance_s > max_recovery_s and reachable:
            assert decision.take and decision.rule == "recovery"
        if not decision.take:
            assert next_chance_s <= max_recovery_s + 1e-9 or not reachable
            assert decision.recovery.total_s == pytest.approx(now_s)
        else:
            snapshot_bytes, folded = state_bytes, 0
            assert decision.recovery.total_s == pytest.approx(FIXED + state_bytes / RESTORE + records / REPLAY)
        previous_recovery_s, previous_records = decision.recovery.total_s, records


@settings(max_examples=200, deadline=None)
@given(series=batches, period_s=st.floats(1.0, 20.0))
def test_outside_the_recovery_bound_at_most_one_snapshot_per_period(series, period_s):
    # Rates so fast that the bound never fires: only peak avoidance decides.
    fast = RecoveryOptions(restore_bytes_per_s=1e15, fold_entries_per_s=1e15, replay_records_per_s=1e15)
    # The seed's rule, one snapshot per period, first at the first batch (no gain asked for).
    policy = AdaptivePolicy(AdaptiveOptions(period_s=period_s, recovery=fast, min_gain_fraction=0.0))
    times, taken = [], []
    for b, (gap_s, records, entries, state_bytes) in enumerate(series):
        times.append(gap_s + (times[-1] if times else 0.0))
        decision = policy.decide(batch(b, times[-1], records=records, entries=entries, state_bytes=state_bytes))
        assert decision.rule != "recovery"
        if decision.take:
            taken.append(times[-1])
    assert taken and taken[0] == times[0]
    assert len(taken) <= math.floor((times[-1] - times[0]) / period_s + 1e-9) + 1


@settings(max_examples=200, deadline=None)
@given(series=batches, period_s=st.floats(1.0, 20.0), max_recovery_s=st.floats(0.5, 6.0))
def test_a_periods_snapshot_takes_at_least_a_tenth_of_its_restore_off_the_recovery(series, period_s, max_recovery_s):
    policy = AdaptivePolicy(AdaptiveOptions(max_recovery_s=max_recovery_s, period_s=period_s, recovery=RECOVERY))
    folded, time_s = 0, 0.0
    for b, (gap_s, records, entries, state_bytes) in enumerate(series):
        time_s += gap_s
        folded += entries
        decision = policy.decide(batch(b, time_s, records=records, entries=entries, state_bytes=state_bytes))
        # Independently: a snapshot now removes the fold of the backlog.
        gain_s = folded / FOLD
        if decision.take and decision.rule != "recovery":
            assert gain_s >= 0.1 * state_bytes / RESTORE - 1e-9
        if decision.rule == "small_gain":
            assert gain_s < 0.1 * state_bytes / RESTORE + 1e-9
        if decision.take:
            folded = 0
