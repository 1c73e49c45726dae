"""As-Stream's prediction of the next window's input (seed 002, §2.5, Eq. 10–11) and pre-scaling.

Eq. 10: an upstream stage j will pass on D_out_j(w) = sel_j · D_in_j(w) + q_out_j(w) rows: what
it makes of its input workload plus what already waits in its output queue. sel_j is the mean
of the per-window selectivities rows_out / rows_in over the monitoring period (windows without
input have no selectivity and are skipped; a stage with none at all gets
`AsStreamOptions.unknown_selectivity`). Eq. 11: stage i's input in the next window is
D_in_i(w+1) = Σ_{j ∈ U_i} min(D_out_j(w), B_ji(w)), the link bandwidth capping each upstream
(an upstream feeding two stages sends its whole output to each, as a Storm stream does).
A source stage has no upstream: the paper puts a virtual operator there; here the caller may
give its forecast, else the source's current input is carried forward.

`pre_scale` turns a prediction into a rescale `Decision` for the existing control loop: the
channels a stage needs for its predicted input at a per-channel capacity, so that a downstream
stage is scaled out before its lag appears. It only ever scales out; shrinking stays with the
reactive controller, which sees real (not predicted) underload.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from elasticity.control.asstream.inputs import StageMonitoring, Topology, by_stage
from elasticity.control.asstream.options import AsStreamOptions
from elasticity.control.decision import Decision


def mean_selectivity(monitoring: StageMonitoring, options: AsStreamOptions) -> float:
    """sel_j: the mean of rows_out / rows_in over the period's windows that had input."""
    ratios = [s.rows_out / s.rows_in for s in monitoring.within(options.monitoring_period_s).samples if s.rows_in > 0]
    return sum(ratios) / len(ratios) if ratios else options.unknown_selectivity


def predicted_output(selectivity: float, rows_in: float, rows_queued_out: float) -> float:
    """Eq. 10: D_out_j(w) = sel_j · D_in_j(w) + q_out_j(w)."""
    return selectivity * rows_in + rows_queued_out


@dataclass(frozen=True)
class StagePrediction:
    """One stage's numbers: sel, D_in(w), q_out(w), D_out(w) (Eq. 10) and D_in(w+1) (Eq. 11)."""

    stage: str
    selectivity: float
    rows_in: float
    rows_queued_out: float
    output_rows: float
    next_input_rows: float


@dataclass(frozen=True)
class InputPrediction:
    """The prediction for every stage, in topological order."""

    stages: tuple[StagePrediction, ...]

    def of(self, stage: str) -> StagePrediction:
        for found in self.stages:
            if found.stage == stage:
                return found
        raise KeyError(stage)


def predict_next_inputs(
    topology: Topology,
    monitorings: Sequence[StageMonitoring],
    options: AsStreamOptions,
    source_input_rows: Mapping[str, float] | None = None,
    offered_rows: Mapping[str, float] | None = None,
) -> InputPrediction:
    """Eq. 10–11 for every stage from each stage's latest window (a stage without samples counts zeros).

    `offered_rows` gives a stage's D_in(w) where the workload offered to it is known apart from
    what it processed (a source over Kafka: the rows that arrived); its selectivity still comes
    from what it processed (rows out per row in)."""
    monitored = by_stage(monitorings)
    unknown = set(monitored) - set(topology.stages)
    if unknown:
        raise ValueError(f"monitoring for stages not in the topology: {sorted(unknown)}")
    forecasts = source_input_rows or {}
    offered = offered_rows or {}
    predictions: dict[str, StagePrediction] = {}
    for stage in topology.topological_order():
        monitoring = monitored.get(stage, StageMonitoring(stage, ()))
        latest = monitoring.latest
        rows_in = offered.get(stage, latest.rows_in if latest is not None else 0.0)
        queued = latest.rows_queued_out if latest is not None else 0.0
        selectivity = mean_selectivity(monitoring, options)
        links = topology.upstream_links(stage)
        if links:
            next_input = sum(min(predictions[link.upstream].output_rows, link.bandwidth_rows) for link in links)
        else:
            next_input = forecasts.get(stage, rows_in)
        predictions[stage] = StagePrediction(
            stage, selectivity, rows_in, queued, predicted_output(selectivity, rows_in, queued), next_input
        )
    return InputPrediction(tuple(predictions.values()))


def channels_needed(predicted_input_rows: float, capacity_rows_per_channel: float, options: AsStreamOptions) -> int:
    """Channels that keep the predicted input at most `target_utilization` of their capacity, clamped."""
    if capacity_rows_per_channel <= 0 or not math.isfinite(capacity_rows_per_channel):
        raise ValueError(f"capacity per channel must be a positive number, got {capacity_rows_per_channel}")
    needed = math.ceil(predicted_input_rows / (capacity_rows_per_channel * options.target_utilization))
    return options.clamp_channels(needed)


def pre_scale(
    prediction: StagePrediction,
    channels: int,
    capacity_rows_per_channel: float,
    options: AsStreamOptions,
    time_s: float,
) -> Decision:
    """Scale `prediction.stage` out now if its predicted input needs more than its `channels`."""
    needed = channels_needed(prediction.next_input_rows, capacity_rows_per_channel, options)
    signals = {
        "predicted_input_rows": prediction.next_input_rows,
        "capacity_rows_per_channel": capacity_rows_per_channel,
        "channels_needed": float(needed),
    }
    basis = (
        f"stage {prediction.stage}: {prediction.next_input_rows:.0f} rows predicted for the next window (Eq. 10-11) "
        f"at {capacity_rows_per_channel:.0f} rows per channel and {options.target_utilization:.0%} utilization "
        f"need {needed} channels"
    )
    scale_out = needed > channels
    return Decision(
        time_s=time_s,
        action="scale_out" if scale_out else "none",
        from_channels=channels,
        to_channels=needed if scale_out else channels,
        rule="as-stream-predict",
        signals=signals,
        reason=f"{basis}; scale out {channels} -> {needed} before the load arrives."
        if scale_out
        else f"{basis}; {channels} suffice.",
    )
