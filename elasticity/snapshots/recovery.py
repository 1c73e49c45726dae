"""How long would this channel take to come back right now? The recovery-time model of seed 003.

Seed 003 (adaptive checkpointing, §2.3.3 节点故障恢复 and its 恢复时间保障) splits a node's
recovery into reading the newest checkpoint back (处理状态恢复) and replaying what the upstream
kept since (上游数据重演). A channel of esp comes back the same way, in three measured parts:

    recovery_s = fixed_s                                    a fresh worker's start (imports)
               + snapshot_bytes   / restore_bytes_per_s    restore the newest snapshot
               + changelog_entries / fold_entries_per_s    fold every changelog after it
               + in_flight_records / replay_records_per_s  replay the uncommitted batch from Kafka

The three rates are learned online, each as an exponentially weighted mean, from observations
the stream reports anyway: a batch's processing is the work of replaying it, a restore after a
crash or on a rescale receiver measures the restore rate, and the fold rate comes from the folds
rebuilds do (exactly a recovery's fold) or, until one is seen, from commits. A commit applies a
changelog to the working set as a fold does, but first writes it durably, which a recovery does
not; so only the apply is timed. In a small batch the write is most of the commit: 50 entries
into a RocksDB channel took 0.9 ms to write and 0.5 ms to apply here, 36k entries/s counted
together against 106k/s for the apply alone: a predicted fold three times too long, which counts
against the recovery bound and makes a snapshot look worth more than it is. The fixed part is
learned apart from the rates, from the start-up a fresh Python worker reports before it reads anything (on this
machine ~0.9 s, pyarrow importing pandas): counted in the restore rate it would make a small
snapshot look slow and the model over-predict every large one. Until a rate has a sample it is
the prior of `RecoveryOptions`; learned rates outlive a driver restart (`LearnedRates`). A rate
is the ratio of the weighted means of amount and seconds, not a mean of ratios, so a
three-record batch dominated by fixed overhead does not swing it.

Everything here is immutable and JSON-serializable; `AdaptivePolicy` (`adaptive.py`) and
`FixedPeriodPolicy` (`policy.py`) keep a `RecoveryTracker` per channel.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, computed_field

from elasticity.state.history import History


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RecoveryOptions(_Frozen):
    """Priors and smoothing of the recovery-time model."""

    smoothing: float = Field(
        0.3, gt=0, le=1, description="Weight of the newest observation in each exponentially weighted mean."
    )
    restore_bytes_per_s: float = Field(
        50e6, gt=0, description="Snapshot restore rate (bytes/s) assumed until a restore is measured."
    )
    fold_entries_per_s: float = Field(
        200_000, gt=0, description="Changelog fold rate (entries/s) assumed until a commit is measured."
    )
    replay_records_per_s: float = Field(
        50_000, gt=0, description="Replay rate (input records/s) assumed until a batch's processing is measured."
    )
    fixed_s: float = Field(
        0.0, ge=0, description="Constant part of every recovery assumed until a fresh worker's start is measured."
    )


class RateEstimate(_Frozen):
    """An online rate: weighted means of an amount and of the seconds it took."""

    amount: float = Field(description="Weighted mean amount per observation (bytes, entries or records).")
    seconds: float = Field(description="Weighted mean seconds per observation.")
    samples: int = Field(0, ge=0, description="Observations learned so far (0: `amount/seconds` is the prior).")

    @classmethod
    def prior(cls, per_s: float) -> RateEstimate:
        return cls(amount=per_s, seconds=1.0, samples=0)

    @property
    def per_s(self) -> float:
        return self.amount / self.seconds

    def learned(self, amount: float, seconds: float, smoothing: float) -> RateEstimate:
        """This estimate with one more observation; one without amount or time carries no rate."""
        if amount <= 0 or seconds <= 0:
            return self
        if self.samples == 0:
            # The prior is a guess: the first measurement replaces it rather than being averaged in.
            return RateEstimate(amount=amount, seconds=seconds, samples=1)
        keep = 1.0 - smoothing
        return RateEstimate(
            amount=keep * self.amount + smoothing * amount,
            seconds=keep * self.seconds + smoothing * seconds,
            samples=self.samples + 1,
        )

    def seconds_for(self, amount: float) -> float:
        return amount / self.per_s if amount > 0 else 0.0


class FixedCost(_Frozen):
    """The constant part of a recovery: a weighted mean of measured fresh-worker starts."""

    seconds: float = Field(0.0, ge=0, description="Weighted mean seconds (the prior while `samples` is 0).")
    samples: int = Field(0, ge=0, description="Starts measured so far.")

    def learned(self, seconds: float, smoothing: float) -> FixedCost:
        if self.samples == 0:
            return FixedCost(seconds=seconds, samples=1)
        return FixedCost(seconds=(1.0 - smoothing) * self.seconds + smoothing * seconds, samples=self.samples + 1)


class RecoveryRates(_Frozen):
    """The three measured rates of one channel, and the fixed part."""

    restore: RateEstimate = Field(description="Snapshot bytes restored per second.")
    fold: RateEstimate = Field(description="Changelog entries folded into the working set per second.")
    replay: RateEstimate = Field(description="Input records replayed (processed) per second.")
    fixed: FixedCost = Field(default_factory=FixedCost, description="A fresh worker's start, before it reads state.")
    rebuild_fold: RateEstimate | None = Field(
        None, description="Changelog entries folded per second by rebuilds (None: none seen; `fold` stands in)."
    )

    @property
    def recovery_fold(self) -> RateEstimate:
        """The fold rate a recovery will see: measured by rebuilds when there was one."""
        return self.rebuild_fold if self.rebuild_fold is not None else self.fold

    @classmethod
    def priors(cls, options: RecoveryOptions) -> RecoveryRates:
        return cls(
            restore=RateEstimate.prior(options.restore_bytes_per_s),
            fold=RateEstimate.prior(options.fold_entries_per_s),
            replay=RateEstimate.prior(options.replay_records_per_s),
            fixed=FixedCost(seconds=options.fixed_s),
        )

    @property
    def samples(self) -> int:
        """Observations behind these rates (0: all priors)."""
        rebuilt = self.rebuild_fold.samples if self.rebuild_fold is not None else 0
        return self.restore.samples + self.fold.samples + self.replay.samples + self.fixed.samples + rebuilt


class LearnedRates(_Frozen):
    """Every channel's learned rates, kept across driver restarts (JSON round-trips).

    A restarted driver's policies start from these instead of the priors, so the first decisions
    after a crash (when a recovery is most likely to come again) already know this machine. A
    channel without its own rates (a rescale created it) starts from the best-learned channel's:
    the rates belong to the job and the machine more than to a key range."""

    channels: dict[int, RecoveryRates] = Field(default_factory=dict)

    def for_channel(self, channel: int) -> RecoveryRates | None:
        own = self.channels.get(channel)
        if own is not None:
            return own
        return max(self.channels.values(), key=lambda rates: rates.samples, default=None)


class Backlog(_Frozen):
    """What a recovery would have to read back: the newest snapshot and every changelog after it."""

    snapshot_bytes: int = Field(0, ge=0, description="Size of the newest snapshot (0: none, start from empty).")
    changelogs: int = Field(0, ge=0, description="Changelogs written since that snapshot.")
    changelog_entries: int = Field(0, ge=0, description="Entries (rows) in those changelogs.")
    changelog_bytes: int = Field(0, ge=0, description="Bytes of those changelogs (reported, not modelled).")

    def plus_changelog(self, entries: int, size_bytes: int) -> Backlog:
        return self.model_copy(
            update={
                "changelogs": self.changelogs + 1,
                "changelog_entries": self.changelog_entries + entries,
                "changelog_bytes": self.changelog_bytes + size_bytes,
            }
        )


def backlog_in_history(history: History, snapshot_bytes: int) -> Backlog:
    """The backlog a channel's durable history holds: its changelogs after the newest snapshot.

    For a policy that starts where history already exists (a restarted worker, a rescale
    receiver), so its first predictions are not blind to it. It reads those changelogs, the same
    ones the store's `sync()`/`restore()` folds on that start. History does not know file sizes:
    `snapshot_bytes` is the caller's measure of the newest snapshot (ignored if there is none).
    """
    snapshots = history.snapshot_versions()
    newest = snapshots[-1] if snapshots else None
    after = [history.read_changelog(v) for v in history.changelog_versions() if newest is None or v > newest]
    return Backlog(
        snapshot_bytes=snapshot_bytes if newest is not None else 0,
        changelogs=len(after),
        changelog_entries=sum(t.num_rows for t in after),
        changelog_bytes=sum(t.nbytes for t in after),
    )


class RecoveryPrediction(_Frozen):
    """A predicted recovery, by part, in seconds."""

    restore_s: float = Field(description="Restoring the newest snapshot.")
    fold_s: float = Field(description="Folding the changelogs after it.")
    replay_s: float = Field(description="Replaying the batch in flight from Kafka.")
    fixed_s: float = Field(0.0, description="The constant part.")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_s(self) -> float:
        return self.fixed_s + self.restore_s + self.fold_s + self.replay_s


class BatchObservation(_Frozen):
    """What one channel reports after committing one micro-batch (the input of a snapshot policy)."""

    batch_id: int = Field(ge=0, description="The committed micro-batch.")
    time_s: float = Field(description="Clock time of the commit (the injected clock's, in seconds).")
    records: int = Field(ge=0, description="Input records of the batch: the coverage, and the size of a replay.")
    changelog_entries: int = Field(ge=0, description="Entries of the changelog the batch wrote.")
    changelog_bytes: int = Field(0, ge=0, description="Bytes of that changelog.")
    state_bytes: int = Field(ge=0, description="Size of the channel's state now: what a snapshot now would hold.")
    fold_s: float | None = Field(
        None, ge=0, description="Seconds the commit spent applying the changelog (None: not measured)."
    )
    process_s: float | None = Field(
        None, ge=0, description="Seconds spent processing the batch's records (None: not measured)."
    )


class RestoreObservation(_Frozen):
    """A measured rebuild (after a crash, on a fresh worker or a rescale receiver)."""

    snapshot_bytes: int = Field(ge=0, description="Size of the restored snapshot (0: none, nothing to learn).")
    seconds: float = Field(ge=0, description="Time the snapshot's restore took.")
    fixed_s: float | None = Field(
        None, ge=0, description="The fresh worker's start before it read anything (None: the worker was warm)."
    )
    fold_entries: int = Field(0, ge=0, description="Changelog entries the rebuild folded after the snapshot.")
    fold_s: float = Field(0.0, ge=0, description="Time that fold took.")


class RecoveryTracker(_Frozen):
    """One channel's learned rates and backlog; every method returns a new tracker."""

    rates: RecoveryRates
    backlog: Backlog = Field(default_factory=Backlog)

    @classmethod
    def start(
        cls, options: RecoveryOptions, backlog: Backlog | None = None, rates: RecoveryRates | None = None
    ) -> RecoveryTracker:
        """A tracker from `rates` learned earlier (the priors without them)."""
        return cls(rates=rates or RecoveryRates.priors(options), backlog=backlog or Backlog())

    def after_batch(self, batch: BatchObservation, options: RecoveryOptions) -> RecoveryTracker:
        """Learn the batch's fold and replay rates; its changelog joins the backlog."""
        rates = self.rates
        if batch.fold_s is not None:
            rates = rates.model_copy(
                update={"fold": rates.fold.learned(batch.changelog_entries, batch.fold_s, options.smoothing)}
            )
        if batch.process_s is not None:
            rates = rates.model_copy(
                update={"replay": rates.replay.learned(batch.records, batch.process_s, options.smoothing)}
            )
        return RecoveryTracker(
            rates=rates, backlog=self.backlog.plus_changelog(batch.changelog_entries, batch.changelog_bytes)
        )

    def after_restore(self, restore: RestoreObservation, options: RecoveryOptions) -> RecoveryTracker:
        """Learn the restore rate (if a snapshot was read) and the fixed part (if the worker was fresh)."""
        learned: dict[str, RateEstimate | FixedCost | None] = {
            "restore": self.rates.restore.learned(restore.snapshot_bytes, restore.seconds, options.smoothing)
        }
        if restore.fixed_s is not None:
            learned["fixed"] = self.rates.fixed.learned(restore.fixed_s, options.smoothing)
        if restore.fold_entries > 0 and restore.fold_s > 0:
            folds = self.rates.rebuild_fold or RateEstimate.prior(1.0)  # a prior the first sample replaces
            learned["rebuild_fold"] = folds.learned(restore.fold_entries, restore.fold_s, options.smoothing)
        return self.model_copy(update={"rates": self.rates.model_copy(update=learned)})

    def after_snapshot(self, snapshot_bytes: int) -> RecoveryTracker:
        """A snapshot now stands in for every changelog so far."""
        return self.model_copy(update={"backlog": Backlog(snapshot_bytes=snapshot_bytes)})

    def with_snapshot_bytes(self, snapshot_bytes: int) -> RecoveryTracker:
        """The backlog's snapshot counted at its measured size instead of the size estimated when
        it was decided (the changelogs since stay)."""
        return self.model_copy(update={"backlog": self.backlog.model_copy(update={"snapshot_bytes": snapshot_bytes})})

    def predict(
        self, in_flight_records: int, options: RecoveryOptions, backlog: Backlog | None = None
    ) -> RecoveryPrediction:
        """Recovery of `backlog` (this tracker's by default) with `in_flight_records` to replay."""
        backlog = backlog or self.backlog
        return RecoveryPrediction(
            restore_s=self.rates.restore.seconds_for(backlog.snapshot_bytes),
            fold_s=self.rates.recovery_fold.seconds_for(backlog.changelog_entries),
            replay_s=self.rates.replay.seconds_for(in_flight_records),
            fixed_s=self.rates.fixed.seconds,
        )
