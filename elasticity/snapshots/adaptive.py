"""Adaptive snapshots: seed 003's recov-guarantee and Peak Avoidance Protocol, per channel, per batch.

Seed 003 (恢复时间保障, 检查点实时性代价 and its "Peak Avoidance Protocol" listing) runs, for
every processed batch:

    recov-guarantee()      if the upstream data to replay would pass the amount that thres_recov
                           allows (SumQS_recov): checkpoint now
    coverage-update()      ckptcov <- coverage now; if ckptcov > blckpt: wait (peak avoidance)
                           else checkpoint-select()
    checkpoint-select()    ICR <- rate of change of the coverage now;
                           ICR < 0: wait, unless it stays < 0 to the period's end (then checkpoint);
                           ICR >= 0: checkpoint (the trough)

and one checkpoint per checkpoint period completes the period. How esp reads each term:

- **recovery** is `recovery.py`'s model: esp predicts the time itself rather than converting the
  bound into an amount of data, since a channel's recovery also restores and folds. The stream
  decides after a batch commits, and the next chance to snapshot is after the next batch: so the
  guarantee fires when the recovery predicted *at the next chance* — this backlog plus one more
  changelog like this batch's, with one more batch like this one in flight — would pass
  `max_recovery_s`. A recovery can therefore pass the bound only by how much the next batch
  outgrows this one. When even a snapshot now would leave the next chance above the bound (the
  batch in flight or the state itself is too big to come back in time), a snapshot cannot
  restore the guarantee and would only add its cost at the peak: the guarantee stands aside and
  says so, the period's rules decide, and admission control (`elasticity.admission`) is the
  lever that shortens the replay; only once what a snapshot would remove (the changelogs to
  fold) passes the bound by itself does the policy snapshot, keeping that part within it.
- **coverage** (检查点数据覆盖量, the data a checkpoint's pause holds up) is the input records of
  the batch just committed: the snapshot is written before the next batch runs, and the next
  batch's input is arriving at the rate this one's did.
- **baseline** (blckpt; the seed's formula did not survive in our copy) is the mean coverage over
  the last checkpoint period, a sliding window of `period_s`: the cost of a snapshot taken at an
  average moment. Above it is a peak.
- **ICR** is the coverage's rate of change between the last two batches, in records/s.
- **periods** are `period_s` long on a grid from the first batch. A snapshot taken by any rule
  completes the current period; after that the policy waits for the next one. A period whose
  snapshot is still deferred at its end runs over (the seed: repeat "until a checkpoint is
  complete"); the snapshot that ends the overrun starts the next period. Past the period's end,
  falling coverage no longer waits. `max_interval_s` optionally caps a deferral outright; without
  it only the recovery bound does, as in the seed.
- **a period's snapshot must be worth its cost** (esp's addition, `min_gain_fraction`). The seed's
  checkpoint costs what changed; esp's snapshot rewrites the channel's whole state (seconds for
  millions of keys, on the driver, beside the batches). So the period's rules stand aside while a
  snapshot would take less fold off the predicted recovery than a fraction of its own restore time:
  a large state that a trickle of changes touches is not rewritten every period. The recovery
  guarantee is not gated: the bound holds as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from elasticity.snapshots.policy import SnapshotDecision, SnapshotRule, recovery_after
from elasticity.snapshots.recovery import (
    Backlog,
    BatchObservation,
    RecoveryOptions,
    RecoveryRates,
    RecoveryTracker,
    RestoreObservation,
)


class AdaptiveOptions(BaseModel):
    """The adaptive policy's knobs; defaults are the seed's (3 s bound, 9 s base period)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_recovery_s: float = Field(3.0, gt=0, description="thres_recov: predicted recovery never to pass this.")
    period_s: float = Field(9.0, gt=0, description="Checkpoint period: one peak-avoiding snapshot per period.")
    max_interval_s: float | None = Field(
        None, gt=0, description="Snapshot at the latest this long after the previous one (None: only the bound)."
    )
    min_gain_fraction: float = Field(
        0.1,
        ge=0,
        description=(
            "A period's snapshot waits while it would shorten the predicted recovery by less than this "
            "fraction of its own restore time (0: one snapshot per period, as in the seed)."
        ),
    )
    recovery: RecoveryOptions = Field(default_factory=RecoveryOptions, description="The recovery-time model.")


class CoverageSample(BaseModel):
    """One batch's coverage, kept for the baseline's window."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    time_s: float
    records: int


class AdaptiveState(BaseModel):
    """What the adaptive policy remembers between batches; JSON round-trips."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tracker: RecoveryTracker
    period_start_s: float | None = Field(None, description="Start of the current period (None: before any batch).")
    period_done: bool = Field(False, description="The current period's snapshot is taken.")
    last_snapshot_s: float | None = Field(None, description="Clock time of the previous snapshot.")
    window: tuple[CoverageSample, ...] = Field((), description="Coverage over the last period, oldest first.")
    last_icr: float | None = Field(None, description="The previous batch's ICR (records/s).")

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> AdaptiveState:
        return cls.model_validate_json(text)


def rate_of_change(previous: CoverageSample | None, time_s: float, records: int) -> float:
    """ICR in records/s; a batch at the same instant still gives the sign of the change."""
    if previous is None:
        return 0.0
    change = float(records - previous.records)
    elapsed = time_s - previous.time_s
    return change / elapsed if elapsed > 0 else change


@dataclass(frozen=True)
class _Moment:
    """What the peak-avoidance rules look at, for one batch."""

    coverage: int
    baseline: float
    icr: float
    last_icr: float | None
    since_snapshot_s: float
    period_done: bool
    period_over: bool
    gain_s: float
    """The fold a snapshot now takes off the predicted recovery at the next chance."""
    snapshot_restore_s: float
    """The predicted restore time of that snapshot: what writing it costs, in the model's units."""


class AdaptivePolicy:
    """recov-guarantee plus peak avoidance for one channel (a `SnapshotPolicy`)."""

    def __init__(self, options: AdaptiveOptions | None = None, state: AdaptiveState | None = None) -> None:
        self.options = options or AdaptiveOptions()
        self.state = state or AdaptiveState(tracker=RecoveryTracker.start(self.options.recovery))

    @property
    def rates(self) -> RecoveryRates:
        return self.state.tracker.rates

    def observe_restore(self, restore: RestoreObservation) -> None:
        tracker = self.state.tracker.after_restore(restore, self.options.recovery)
        self.state = self.state.model_copy(update={"tracker": tracker})

    def observe_snapshot_size(self, snapshot_bytes: int) -> None:
        self.state = self.state.model_copy(update={"tracker": self.state.tracker.with_snapshot_bytes(snapshot_bytes)})

    def decide(self, batch: BatchObservation) -> SnapshotDecision:
        opts, state, now = self.options, self.state, batch.time_s
        tracker = state.tracker.after_batch(batch, opts.recovery)

        window = state.window
        icr = rate_of_change(window[-1] if window else None, now, batch.records)
        window = (
            *(s for s in window if s.time_s > now - opts.period_s),
            CoverageSample(time_s=now, records=batch.records),
        )
        baseline = sum(s.records for s in window) / len(window)

        start = now if state.period_start_s is None else state.period_start_s
        done = state.period_done
        if done and now >= start + opts.period_s:
            start += math.floor((now - start) / opts.period_s) * opts.period_s
            while now >= start + opts.period_s:  # the division may round down
                start += opts.period_s
            done = False
        period_end = start + opts.period_s
        # The next chance is after the next batch: one more changelog and one more batch like this one.
        next_chance = tracker.predict(
            batch.records,
            opts.recovery,
            tracker.backlog.plus_changelog(batch.changelog_entries, batch.changelog_bytes),
        )
        # A snapshot now leaves, at the next chance, the fresh snapshot plus that one changelog.
        after_snapshot = tracker.predict(
            batch.records,
            opts.recovery,
            Backlog(snapshot_bytes=batch.state_bytes).plus_changelog(batch.changelog_entries, batch.changelog_bytes),
        )
        since = state.last_snapshot_s if state.last_snapshot_s is not None else start
        # The fold a snapshot removes, not the restore it changes: the restore's part moves with
        # every new estimate of a state's bytes, and a snapshot rewrites the state anyway.
        gain_s = next_chance.fold_s - after_snapshot.fold_s
        signals = {
            "coverage": float(batch.records),
            "baseline": baseline,
            "icr": icr,
            "recovery_next_s": next_chance.total_s,
            "recovery_next_after_snapshot_s": after_snapshot.total_s,
            "period_left_s": period_end - now,
            "recovery_gain_s": gain_s,
        }
        moment = _Moment(
            coverage=batch.records,
            baseline=baseline,
            icr=icr,
            last_icr=state.last_icr,
            since_snapshot_s=now - since,
            period_done=done,
            period_over=now >= period_end,
            gain_s=gain_s,
            snapshot_restore_s=after_snapshot.restore_s,
        )
        rule, reason = self._rule(moment, next_chance.total_s, after_snapshot.total_s)
        take = rule in ("recovery", "max_interval", "trough", "low", "period_end")
        if take:
            if now >= period_end:
                start = now  # an overrun's snapshot starts the next period
            done = True
        self.state = AdaptiveState(
            tracker=tracker.after_snapshot(batch.state_bytes) if take else tracker,
            period_start_s=start,
            period_done=done,
            last_snapshot_s=now if take else state.last_snapshot_s,
            window=window,
            last_icr=icr,
        )
        return SnapshotDecision(
            batch_id=batch.batch_id,
            time_s=now,
            take=take,
            rule=rule,
            reason=reason,
            recovery=recovery_after(tracker, batch, take, opts.recovery),
            signals=signals,
        )

    def _rule(self, moment: _Moment, next_recovery_s: float, after_snapshot_s: float) -> tuple[SnapshotRule, str]:
        bound = self.options.max_recovery_s
        if next_recovery_s > bound and after_snapshot_s <= bound:
            return "recovery", f"recovery would reach {next_recovery_s:.1f} s > {bound:.1f} s before the next chance"
        avoidable_s = next_recovery_s - after_snapshot_s
        if next_recovery_s > bound and avoidable_s > bound:
            # Out of reach, but what a snapshot removes (the changelogs to fold) has grown past
            # the bound by itself: the policy keeps that part within the bound.
            return "recovery", (
                f"bound out of reach ({after_snapshot_s:.1f} s even after a snapshot > {bound:.1f} s), and the "
                f"{avoidable_s:.1f} s a snapshot removes would pass it before the next chance"
            )
        rule, reason = self._peak_rules(moment)
        if next_recovery_s > bound:
            # Out of reach: what dominates is the batch in flight or the state itself, which no
            # snapshot shortens (admission control does); snapshotting every batch would only add
            # its cost at the peak, so the period's rules decide until the avoidable part passes it.
            reason = (
                f"bound out of reach (recovery {next_recovery_s:.1f} s, {after_snapshot_s:.1f} s even after a "
                f"snapshot > {bound:.1f} s); {reason}"
            )
        return rule, reason

    def _peak_rules(self, m: _Moment) -> tuple[SnapshotRule, str]:
        opts = self.options
        if opts.max_interval_s is not None and m.since_snapshot_s >= opts.max_interval_s:
            return "max_interval", f"{m.since_snapshot_s:.1f} s since the last snapshot ≥ {opts.max_interval_s:g} s"
        if m.period_done:
            return "period_done", "this period's snapshot is taken"
        if opts.min_gain_fraction > 0 and m.gain_s < opts.min_gain_fraction * m.snapshot_restore_s:
            return "small_gain", (
                f"a snapshot would take {m.gain_s:.3f} s off the recovery, less than {opts.min_gain_fraction:g} "
                f"of its own {m.snapshot_restore_s:.2f} s restore"
            )
        if m.coverage > m.baseline:
            late = " past the period's end" if m.period_over else ""
            return "peak", (
                f"deferred{late}: coverage {m.coverage / m.baseline:.1f}× baseline "
                f"({m.coverage} vs {m.baseline:.0f} records)"
            )
        if m.icr < 0:
            if m.period_over:
                return "period_end", f"period ended while coverage still falling (ICR {m.icr:.0f} records/s)"
            return "falling", f"waiting for the trough: coverage falling (ICR {m.icr:.0f} records/s)"
        if m.last_icr is not None and m.last_icr < 0:
            return "trough", f"trough: ICR turned + ({m.last_icr:.0f} → {m.icr:.0f} records/s)"
        return "low", f"coverage at or below baseline ({m.coverage} ≤ {m.baseline:.0f} records) and not falling"
