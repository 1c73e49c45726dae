"""A fluid model of a multi-stage micro-batch job, driven by the real `StagesLoop`.

The stages of a micro-batch run one after the other: stage k gets s_k rows per input record (s_1
= 1, s_(k+1) = s_k · sel_k) and processes μ_k rows per second on each of its c_k channels, so the
job gets through R = (1 − overhead) / Σ_k s_k / (c_k · μ_k) input records per second, the
`batch_overhead_share` standing for the fixed work of a batch (reading Kafka, sinks, commits). Per
tick the model solves this for constant rates: an optional rescale pause first (arrivals pile up
in Kafka, nothing is processed), then the job processes min(backlog + arrivals, R · working time).

It hands the loop the very `JobSnapshot` the real collector builds: the stream's snapshot (probe
latency = base + backlog / R, the same on every first-stage channel as in lock-step batches;
throughput per channel; arrival rate; lag over the Kafka partitions) and every stage's batches
(own time s_k · processed / (c_k · μ_k), rows in and out, channels). `ChainRealizer` applies the
loop's decisions: every stage rescaled in one tick changes at the same batch boundary, one pause.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from elasticity.control.asstream.job import JobSnapshot, StageBatch, StageView
from elasticity.control.asstream.loop import StagesLoop
from elasticity.control.asstream.options import StagesOptions
from elasticity.control.asstream.policies import StageDecision
from elasticity.control.clock import ManualClock
from elasticity.control.options import ControlOptions
from elasticity.control.signals import FloatArray, MetricsSnapshot
from elasticity.control.traces import Trace

KEPT_BATCHES = 120
"""Batches per stage the model keeps for the collector (as the real one reads the last 120)."""


class ChainStage(BaseModel):
    """One stage of the simulated chain."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="The stage's name (the first is the job's source stage).")
    service_rate_rps: float = Field(gt=0, description="Rows per second one channel of the stage processes.")
    selectivity: float = Field(1.0, ge=0, description="Rows out per row in.")
    channels: int = Field(1, ge=1, description="Channels at the start.")


class ChainModelOptions(BaseModel):
    """Parameters of the chain model (not of the controller)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stages: tuple[ChainStage, ...] = Field(min_length=1, description="The stages in chain order.")
    tick_s: float = Field(5.0, gt=0, description="Simulated time per tick; the loop's sampling period.")
    base_latency_s: float = Field(2.0, ge=0, description="Probe latency of an idle job (a batch's fixed work).")
    batch_overhead_share: float = Field(
        0.3, ge=0, lt=1, description="Share of the time spent on a batch's fixed work, not on any stage."
    )
    rescale_pause_s: float = Field(2.0, ge=0, description="Processing stops this long after a tick's rescales.")
    kafka_partitions: int = Field(4, ge=1, description="Input topic partitions the lag is reported for.")
    arrival_noise: float = Field(0.02, ge=0, lt=1, description="Relative standard deviation of a tick's arrivals.")
    probe_timeout_s: float = Field(45.0, gt=0, description="Probe latencies above this count as timeouts.")
    seed: int = Field(0, description="Seed of the arrival noise (runs are reproducible).")


class ChainModel:
    """The mutable state of the simulated job."""

    def __init__(self, options: ChainModelOptions) -> None:
        self.options = options
        self.channels = [s.channels for s in options.stages]
        self.backlog = 0.0
        self.epoch = 0
        self.pending_pause_s = 0.0
        self.batches: list[deque[StageBatch]] = [deque(maxlen=KEPT_BATCHES) for _ in options.stages]
        self.last: JobSnapshot | None = None
        self.latency_s = options.base_latency_s
        self._rng = np.random.default_rng(options.seed)

    def rows_per_record(self) -> list[float]:
        """s_k: rows stage k gets per input record."""
        shares, share = [], 1.0
        for stage in self.options.stages:
            shares.append(share)
            share *= stage.selectivity
        return shares

    def job_rate_rps(self) -> float:
        """R: input records per second the job gets through with its current channels."""
        cost = sum(
            s / (c * stage.service_rate_rps)
            for s, c, stage in zip(self.rows_per_record(), self.channels, self.options.stages)
        )
        return (1.0 - self.options.batch_overhead_share) / cost if cost > 0 else float("inf")

    def advance(self, rate_rps: float, end_time_s: float) -> JobSnapshot:
        """One tick at a constant input rate; the job's snapshot at its end."""
        opts = self.options
        tick = opts.tick_s
        arrivals = max(0.0, rate_rps * tick * (1.0 + opts.arrival_noise * self._rng.standard_normal()))
        pause = min(self.pending_pause_s, tick)
        self.pending_pause_s -= pause
        rate = self.job_rate_rps()
        processed = min(self.backlog + arrivals, rate * (tick - pause))
        self.backlog += arrivals - processed
        self.latency_s = opts.base_latency_s + self.backlog / rate + self.pending_pause_s
        for index, (s, stage) in enumerate(zip(self.rows_per_record(), opts.stages)):
            rows = processed * s
            busy = rows / (self.channels[index] * stage.service_rate_rps)
            self.batches[index].append(
                StageBatch(end_time_s, tick, busy, round(rows), round(rows * stage.selectivity), self.channels[index])
            )
        first = self.channels[0]
        stream = MetricsSnapshot.build(
            time_s=end_time_s,
            probe_latency_s=[self.latency_s] * first,
            probe_timed_out=[self.latency_s > opts.probe_timeout_s] * first,
            throughput_rps=[processed / tick / first] * first,
            input_rate_rps=arrivals / tick,
            lag_records=[self.backlog / opts.kafka_partitions] * opts.kafka_partitions,
            layout_epoch=self.epoch,
            busy_share=[self.batches[0][-1].stage_s / tick] * first,
        )
        views = tuple(
            StageView(stage.name, self.channels[i], tuple(self.batches[i])) for i, stage in enumerate(opts.stages)
        )
        self.last = JobSnapshot(stream, views)
        return self.last

    def rescale(self, decisions: Sequence[StageDecision]) -> None:
        """Apply a tick's decisions at one batch boundary: one pause, the epoch moves on."""
        names = [s.name for s in self.options.stages]
        for decided in decisions:
            self.channels[names.index(decided.stage)] = decided.decision.to_channels
        self.epoch += 1
        self.pending_pause_s += self.options.rescale_pause_s


class ChainCollector:
    """Hands the loop the snapshot of the tick just simulated."""

    def __init__(self, model: ChainModel) -> None:
        self.model = model

    def collect(self, now_s: float) -> JobSnapshot:
        if self.model.last is None:
            raise RuntimeError("advance the model before collecting")
        return self.model.last


class ChainRealizer:
    """Applies a tick's decisions to the model, as the stages' resize runs apply them to the layouts."""

    def __init__(self, model: ChainModel) -> None:
        self.model = model
        self.decided: list[StageDecision] = []

    def apply(self, decisions: Sequence[StageDecision]) -> None:
        self.model.rescale(decisions)
        self.decided.extend(decisions)


@dataclass
class ChainRun:
    """Per-tick series of one simulated run: input rate, channels per stage, latency, decisions."""

    times_s: FloatArray
    input_rate_rps: FloatArray
    channels: dict[str, FloatArray]
    latency_s: FloatArray
    congested: list[bool]
    decisions: list[StageDecision] = field(default_factory=list)


def simulate_chain(
    trace: Trace, model_options: ChainModelOptions, stages_options: StagesOptions, control: ControlOptions
) -> ChainRun:
    """Run the trace through the chain model with the real `StagesLoop` deciding every tick."""
    model = ChainModel(model_options)
    realizer = ChainRealizer(model)
    clock = ManualClock(0.0)
    loop = StagesLoop(stages_options, control, ChainCollector(model), realizer, clock)
    starts = np.arange(0.0, trace.duration_s, model_options.tick_s)
    names = [s.name for s in model_options.stages]
    channels = {name: np.zeros(starts.size) for name in names}
    latency, arrivals, congested = np.zeros(starts.size), np.zeros(starts.size), []
    for i, start in enumerate(starts):
        for index, name in enumerate(names):
            channels[name][i] = model.channels[index]
        end = float(start + model_options.tick_s)
        job = model.advance(float(trace.rate_at(np.array([start]))[0]), end)
        clock.set(end)
        loop.tick()
        latency[i], arrivals[i] = model.latency_s, job.stream.input_rate_rps
        congested.append(loop.last_evaluation is not None and loop.last_evaluation.congested)
    return ChainRun(starts, arrivals, channels, latency, congested, realizer.decided)
