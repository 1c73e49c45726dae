"""The fixed period kept for comparison: today's cadence, in batches or in seconds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from elasticity.snapshots import FixedPeriodOptions, FixedPeriodPolicy, RecoveryOptions
from tests.unit.snapshots.observations import batch, run, taken_at


def test_every_25_batches_is_todays_rule_on_batch_ids():
    decisions = run(FixedPeriodPolicy(FixedPeriodOptions(every_batches=25)), [10] * 100)
    assert taken_at(decisions) == [24, 49, 74, 99]
    assert {d.rule for d in decisions if not d.take} == {"not_due"}


def test_the_batch_rule_survives_a_restart_because_it_reads_batch_ids():
    policy = FixedPeriodPolicy(FixedPeriodOptions(every_batches=10))
    assert [policy.decide(batch(i, float(i))).take for i in range(37, 52)].count(True) == 2
    assert FixedPeriodPolicy(FixedPeriodOptions(every_batches=10)).decide(batch(39, 0.0)).take


def test_every_t_seconds_counts_from_the_previous_snapshot():
    decisions = run(FixedPeriodPolicy(FixedPeriodOptions(every_s=10.0)), [10] * 40, every_s=1.5)
    times = [d.time_s for d in decisions if d.take]
    assert times == [10.5, 21.0, 31.5, 42.0, 52.5]
    assert all(later - earlier >= 10.0 for earlier, later in zip(times, times[1:]))


def test_the_fixed_period_reports_recovery_growing_between_snapshots():
    options = FixedPeriodOptions(every_batches=4, recovery=RecoveryOptions(fold_entries_per_s=100))
    decisions = run(FixedPeriodPolicy(options), [0] * 8, entries=50)
    assert [d.recovery.fold_s for d in decisions] == pytest.approx([0.5, 1.0, 1.5, 0.0, 0.5, 1.0, 1.5, 0.0])


@pytest.mark.parametrize("period", [{}, {"every_batches": 5, "every_s": 3.0}])
def test_exactly_one_period_must_be_set(period):
    with pytest.raises(ValidationError, match="exactly one"):
        FixedPeriodOptions(**period)
