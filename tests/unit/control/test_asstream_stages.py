"""The multi-stage control loop (`elasticity.control.asstream` job, policies, loop) on hand-computed cases.

- `StageView` / `JobSnapshot` / `stage_batches`: what the policies size with (rows per second,
  per-channel capacity, busy share, measured input) and what a snapshot refuses.
- `AsStreamPolicy`: pre-scales a downstream stage from the Kafka arrival rate before the job is
  congested (Eq. 10-11), grows the stage ranked first by Eq. 9 when it is, shrinks on the
  predicted input when it is quiet.
- `ReactivePolicy`: grows the busiest stage only when congested; never pre-scales (the contrast).
- `TogetherPolicy`: the single-stage controller's target for every stage.
- `StagesLoop`: realizes decisions, cools down, retries after a failed realization, keeps its
  state in JSON, refuses a scale-in utilization at or above the target.

Most cases run on a two-stage chain "main" -> "pages" whose batches end every 10 s up to
NOW = 100 s (see `chain`): "main" keeps half its rows (selectivity 0.4 and 0.6 alternating,
mean 0.5, latest 0.6) and is busy 2 s of every 10; "pages" processes 100 rows/s per channel (its
best batch). The stages of a micro-batch run one after the other, so a stage sizes for the target
utilization 0.7 times the wall time the others leave (`stage_budget`): pages plans for
0.7 x (1 - 0.2) = 0.56 of its channels' capacity, i.e. 56 rows/s per channel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from elasticity.control.asstream import (
    AsStreamOptions,
    AsStreamPolicy,
    JobSnapshot,
    ReactivePolicy,
    RecordingStagesRealizer,
    StageBatch,
    StageDecision,
    StagesLoop,
    StagesLoopState,
    StagesOptions,
    StageView,
    TogetherPolicy,
    stage_batches,
)
from elasticity.control.asstream.job import MIN_CAPACITY_ROWS
from elasticity.control.asstream.policies import MIN_SHARE
from elasticity.control.clock import ManualClock
from elasticity.control.controller import ControllerState, ScalingController
from elasticity.control.options import ControllerOptions, ControlOptions
from elasticity.control.signals import Evaluation, MetricsSnapshot
from tests.fakes.control import make_evaluation

NOW = 100.0
TARGET = 0.7  # AsStreamOptions.target_utilization's default
MAIN_SELECTIVITY = 0.5  # mean of the alternating 400/1000 and 600/1000 of `main_stage`
MAIN_BUSY = 0.2  # main_stage's own time, 2 s of every 10
PAGES_CAPACITY_RPS = 100.0  # rows per second per channel of `pages_stage`'s batches
PAGES_BUDGET = TARGET * (1 - MAIN_BUSY)  # 0.56: the utilization pages plans for beside main


# ------------------------------------------------------------------ builders
def batches(
    *,
    channels: int,
    stage_s: float,
    rows_in: int,
    rows_out: int | Sequence[int],
    every_s: float = 10.0,
    count: int = 4,
    end_s: float = NOW,
    spikes: dict[float, float] | None = None,
) -> tuple[StageBatch, ...]:
    """`count` batches `every_s` apart ending at `end_s`; `spikes` overrides the stage time at given ends."""
    ends = [end_s - every_s * (count - 1 - i) for i in range(count)]
    outs = [rows_out] * count if isinstance(rows_out, int) else list(rows_out)
    spikes = spikes or {}
    return tuple(
        StageBatch(end, every_s, spikes.get(end, stage_s), rows_in, out, channels) for end, out in zip(ends, outs)
    )


def main_stage(channels: int = 2, end_s: float = NOW) -> StageView:
    """1000 rows per 10 s (100 rows/s) in 2 s of own time (busy 20%); selectivity 0.4, 0.6, 0.4, 0.6
    (mean 0.5); 1000 / (2 x channels) rows/s per channel."""
    return StageView(
        "main",
        channels,
        batches(channels=channels, stage_s=2.0, rows_in=1000, rows_out=(400, 600, 400, 600), end_s=end_s),
    )


def pages_stage(channels: int = 1, *, rows_per_s: float = 50.0, end_s: float = NOW) -> StageView:
    """`rows_per_s` measured input; the own time is set so that one channel carries 100 rows/s, so the
    stage is busy rows_per_s / (100 x channels) of the time."""
    rows_in = round(rows_per_s * 10.0)
    stage_s = rows_in / (PAGES_CAPACITY_RPS * channels)
    return StageView(
        "pages", channels, batches(channels=channels, stage_s=stage_s, rows_in=rows_in, rows_out=rows_in, end_s=end_s)
    )


def stream(time_s: float, channels: int, arrival_rps: float, lag_records: float = 0.0) -> MetricsSnapshot:
    """The job's stream signals: probes on the first stage's channels, the Kafka arrival rate and lag."""
    return MetricsSnapshot.build(
        time_s=time_s,
        probe_latency_s=[0.2] * channels,
        throughput_rps=[arrival_rps / channels] * channels,
        input_rate_rps=arrival_rps,
        lag_records=[lag_records],
    )


def job(*stages: StageView, time_s: float = NOW, arrival_rps: float = 100.0) -> JobSnapshot:
    return JobSnapshot(stream(time_s, stages[0].channels, arrival_rps), stages)


def chain(main_channels: int = 2, pages_channels: int = 1, *, time_s: float = NOW, **pages: float) -> JobSnapshot:
    return job(main_stage(main_channels, time_s), pages_stage(pages_channels, end_s=time_s, **pages), time_s=time_s)


def quiet(arrival_rps: float, *, ready_down: bool = True) -> Evaluation:
    """The job keeps up (no lag congestion, no overload) and its windows are full."""
    return make_evaluation(2, input_rate_rps=arrival_rps, ready_up=True, ready_down=ready_down)


def not_ready(arrival_rps: float) -> Evaluation:
    """The job keeps up, but its windows are still filling: neither growing nor shrinking by the detectors."""
    return make_evaluation(2, input_rate_rps=arrival_rps, ready_up=False, ready_down=False)


def congested(arrival_rps: float) -> Evaluation:
    """The job falls behind (lag congestion) with full overload and congestion windows."""
    evaluation = make_evaluation(2, input_rate_rps=arrival_rps, congested=True, ready_up=True, ready_down=False)
    assert evaluation.congested  # what the policies test (lag congestion or persistent overload)
    return evaluation


def as_stream(**options: object) -> AsStreamPolicy:
    return AsStreamPolicy(StagesOptions(**options))


def decide(policy: object, evaluation: Evaluation, snapshot: JobSnapshot) -> dict[str, StageDecision]:
    """The policy's decisions keyed by stage (a stage twice would be a bug: checked)."""
    _, decisions = policy.decide(ControllerState(), evaluation, snapshot, NOW)  # type: ignore[attr-defined]
    by_stage = {d.stage: d for d in decisions}
    assert len(by_stage) == len(decisions), f"a stage decided twice: {decisions}"
    return by_stage


def moves(decisions: dict[str, StageDecision]) -> dict[str, tuple[int, int, str]]:
    """stage -> (from, to, rule): what a test compares."""
    return {s: (d.decision.from_channels, d.decision.to_channels, d.decision.rule) for s, d in decisions.items()}


# ------------------------------------------------------------------ StageView, JobSnapshot, stage_batches
def test_rates_are_rows_per_second_of_each_batchs_own_interval_within_the_period():
    view = StageView(
        "s",
        1,
        (
            StageBatch(time_s=10.0, interval_s=5.0, stage_s=9.0, rows_in=9000, rows_out=9000, channels=1),  # too old
            StageBatch(time_s=80.0, interval_s=10.0, stage_s=2.0, rows_in=1000, rows_out=300, channels=1),
            StageBatch(time_s=85.0, interval_s=5.0, stage_s=1.5, rows_in=1000, rows_out=250, channels=1),
        ),
    )
    monitoring = view.rates(period_s=60.0, now_s=NOW)
    assert monitoring.stage == "s"
    got = [(s.time_s, s.mean_latency_s, s.rows_in, s.rows_out) for s in monitoring.samples]
    assert got == [(80.0, 2.0, 100.0, 30.0), (85.0, 1.5, 200.0, 50.0)]


def test_input_rate_is_all_rows_over_all_intervals_and_none_without_batches():
    view = StageView(
        "s",
        1,
        (
            StageBatch(10.0, 10.0, 1.0, 7000, 0, 1),  # outside the period
            StageBatch(90.0, 10.0, 1.0, 1000, 0, 1),
            StageBatch(95.0, 5.0, 1.0, 500, 0, 1),
        ),
    )
    assert view.input_rate_rps(60.0, NOW) == pytest.approx(1500 / 15)
    assert view.input_rate_rps(60.0, now_s=1000.0) is None


def test_capacity_is_the_best_batch_large_enough_and_none_when_no_batch_is():
    small_but_fast = StageBatch(70.0, 10.0, stage_s=0.01, rows_in=MIN_CAPACITY_ROWS - 1, rows_out=0, channels=1)
    slow = StageBatch(80.0, 10.0, stage_s=3.0, rows_in=600, rows_out=0, channels=2)  # 600 / (3 * 2) = 100
    best = StageBatch(90.0, 10.0, stage_s=2.0, rows_in=800, rows_out=0, channels=2)  # 800 / (2 * 2) = 200
    just_enough = StageBatch(95.0, 5.0, stage_s=0.5, rows_in=MIN_CAPACITY_ROWS, rows_out=0, channels=1)  # 100
    old_and_fastest = StageBatch(10.0, 10.0, stage_s=0.1, rows_in=10_000, rows_out=0, channels=1)
    view = StageView("s", 2, (old_and_fastest, small_but_fast, slow, best, just_enough))
    assert view.capacity_per_channel_rps(60.0, NOW) == pytest.approx(200.0)
    assert StageView("s", 1, (small_but_fast, just_enough)).capacity_per_channel_rps(60.0, NOW) == pytest.approx(
        MIN_CAPACITY_ROWS / 0.5
    )
    assert StageView("s", 1, (small_but_fast,)).capacity_per_channel_rps(60.0, NOW) is None
    assert StageView("s", 1, ()).capacity_per_channel_rps(60.0, NOW) is None


def test_busy_share_is_own_time_over_wall_time_capped_at_one_and_zero_without_batches():
    view = StageView("s", 1, (StageBatch(90.0, 10.0, 2.0, 100, 0, 1), StageBatch(100.0, 10.0, 3.0, 100, 0, 1)))
    assert view.busy_share(60.0, NOW) == pytest.approx(5.0 / 20.0)
    overrun = StageView("s", 1, (StageBatch(100.0, 1.0, 4.0, 100, 0, 1),))
    assert overrun.busy_share(60.0, NOW) == 1.0
    assert StageView("s", 1, ()).busy_share(60.0, NOW) == 0.0


def test_stage_batches_measure_each_interval_from_the_previous_end_and_the_first_by_its_own_time():
    made = stage_batches(
        ends_s=[10.0, 12.0, 15.0, 15.0],
        stage_s=[0.5, 1.0, 2.0, 0.3],
        rows=[(10, 5), (20, 10), (30, 15), (40, 20)],
        channels=[1, 1, 2, 2],
    )
    assert [b.interval_s for b in made] == pytest.approx([0.5, 2.0, 3.0, 1e-3])
    assert [(b.time_s, b.stage_s, b.rows_in, b.rows_out, b.channels) for b in made] == [
        (10.0, 0.5, 10, 5, 1),
        (12.0, 1.0, 20, 10, 1),
        (15.0, 2.0, 30, 15, 2),
        (15.0, 0.3, 40, 20, 2),
    ]


def test_a_job_snapshot_needs_stages_with_distinct_names_and_knows_its_chain():
    snapshot = chain()
    assert snapshot.topology.topological_order() == ("main", "pages")
    assert snapshot.source.stage == "main" and snapshot.of("pages").channels == 1
    with pytest.raises(KeyError):
        snapshot.of("sink")
    with pytest.raises(ValueError, match="at least one stage"):
        JobSnapshot(stream(NOW, 1, 100.0), ())
    with pytest.raises(ValueError, match="repeat"):
        JobSnapshot(stream(NOW, 2, 100.0), (main_stage(), main_stage()))


# ------------------------------------------------------------------ AsStreamPolicy
@pytest.mark.parametrize("arrival", [400.0, 1000.0])
def test_as_stream_pre_scales_pages_for_a_rising_arrival_before_the_job_is_congested(arrival: float):
    # main measured 100 rows/s; now `arrival` rows/s arrive on Kafka. Eq. 10-11: pages gets sel_main
    # (the mean 0.5 of what main processed, not the latest 0.6, nor 60 rows out per `arrival` in)
    # x the arrival: 200 rows/s -> ceil(200 / 56) = 4 channels (0.6 would give 5, 70% alone 3);
    # 500 rows/s -> ceil(500 / 56) = 9.
    predicted = MAIN_SELECTIVITY * arrival
    expected = math.ceil(predicted / (PAGES_CAPACITY_RPS * PAGES_BUDGET))
    assert expected == {400.0: 4, 1000.0: 9}[arrival]
    for evaluation in (not_ready(arrival), quiet(arrival, ready_down=False), quiet(arrival)):
        assert not evaluation.congested
        decisions = decide(as_stream(), evaluation, chain(pages_channels=1))
        # Only the downstream stage is pre-scaled: the source's input is the Kafka lag's business.
        assert moves(decisions) == {"pages": (1, expected, "as-stream-predict")}
        signals = decisions["pages"].decision.signals
        assert signals["predicted_input_rows"] == pytest.approx(predicted)
        assert signals["capacity_rows_per_channel"] == pytest.approx(PAGES_CAPACITY_RPS)
        assert decisions["pages"].decision.action == "scale_out"


def test_as_stream_predicts_from_the_recent_arrival_when_it_is_above_the_periods():
    # The period averaged 100 rows/s, but 400 rows/s arrived in the last seconds (a rise just
    # before the tick): pages is sized for 0.5 x 400 = 200 rows/s -> ceil(200 / 56) = 4 channels.
    rising = replace(chain(pages_channels=1), recent_arrival_rps=400.0)
    assert moves(decide(as_stream(), not_ready(100.0), rising)) == {"pages": (1, 4, "as-stream-predict")}
    # Without the recent reading, or with a recent rate below the period's (a fall, or timestamps
    # that look old), the period's 100 rows/s: 50 rows/s fit pages' one channel.
    assert decide(as_stream(), not_ready(100.0), chain(pages_channels=1)) == {}
    assert decide(as_stream(), not_ready(100.0), replace(chain(pages_channels=1), recent_arrival_rps=0.0)) == {}
    falling = replace(chain(pages_channels=1), recent_arrival_rps=100.0)
    assert moves(decide(as_stream(), not_ready(400.0), falling)) == {"pages": (1, 4, "as-stream-predict")}


def test_as_stream_pre_scales_for_the_wall_time_the_other_stages_leave():
    # 0.5 x 100 rows/s = 50 rows/s for pages. Beside a main busy 20%: ceil(50 / 56) = 1, as it has.
    # Beside a main busy 50%: 0.7 x 0.5 = 35 rows/s per channel -> 2. Beside a main busy all the
    # time the budget stops at MIN_SHARE: 10 rows/s per channel -> 5.
    def main_busy(stage_s: float) -> StageView:
        return StageView("main", 2, batches(channels=2, stage_s=stage_s, rows_in=1000, rows_out=500))

    for stage_s, expected in ((2.0, None), (5.0, 2), (10.0, math.ceil(50 / (PAGES_CAPACITY_RPS * MIN_SHARE)))):
        decisions = decide(as_stream(), not_ready(100.0), job(main_busy(stage_s), pages_stage(1)))
        assert moves(decisions) == ({} if expected is None else {"pages": (1, expected, "as-stream-predict")})


def test_as_stream_passes_the_whole_arrival_on_from_a_source_without_batches():
    # main processed nothing in the period (stalled): its selectivity is unknown, 1.0 by default, so
    # pages is predicted all 400 rows/s (main busy 0: budget 0.7) -> ceil(400 / 70) = 6, not shrunk.
    snapshot = job(StageView("main", 2, ()), pages_stage(4))
    assert moves(decide(as_stream(), quiet(400.0), snapshot)) == {"pages": (4, 6, "as-stream-predict")}


def test_as_stream_does_not_pre_scale_when_the_predicted_input_fits():
    # 0.5 x 100 rows/s = 50 rows/s for pages: ceil(50 / 56) = 1 channel, which it has.
    assert decide(as_stream(), not_ready(100.0), chain(pages_channels=1)) == {}
    # The same input on a stage whose channel carries only 60 rows/s: ceil(50 / (60 x 0.56)) = 2.
    slower = StageView("pages", 1, batches(channels=1, stage_s=10.0, rows_in=600, rows_out=600))
    assert moves(decide(as_stream(), not_ready(100.0), job(main_stage(), slower))) == {
        "pages": (1, 2, "as-stream-predict")
    }


def test_as_stream_does_not_pre_scale_a_stage_without_a_batch_large_enough_to_size_it():
    tiny = StageView(
        "pages", 1, batches(channels=1, stage_s=0.1, rows_in=MIN_CAPACITY_ROWS - 1, rows_out=MIN_CAPACITY_ROWS - 1)
    )
    assert decide(as_stream(), not_ready(10_000.0), job(main_stage(), tiny)) == {}


@pytest.mark.parametrize(
    ("executors", "expected"),
    [(1, 6), (2, math.ceil(1.5 * 3)), (3, math.ceil(4 / 3 * 3))],
    ids=["N_executer=1: doubles", "N_executer=2: x1.5 rounded up", "N_executer=3: x4/3"],
)
def test_as_stream_grows_the_busiest_unranked_stage_by_eq_9_when_congested(executors: int, expected: int):
    # Flat own times: no stage is above its trend, every level is 0 and counts as 1 in Eq. 9; the
    # busier stage (pages 50% vs main 20%) is ranked first. Its 3 channels carry the predicted 50 rows/s.
    snapshot = chain(main_channels=2, pages_channels=3, rows_per_s=150.0)
    assert snapshot.of("pages").busy_share(60.0, NOW) > snapshot.of("main").busy_share(60.0, NOW)
    decisions = decide(as_stream(executors=executors), congested(100.0), snapshot)
    assert moves(decisions) == {"pages": (3, expected, "as-stream-plan")}
    assert decisions["pages"].decision.signals["level"] == 1.0


def spiky_chain(pages_spike_s: float | None = None) -> JobSnapshot:
    """Batches every 2 s for 60 s: main's own time 0.5 s with two spikes to 3 s in one bottleneck
    interval (so main has a counting T_bottleneck: level 1), pages busier (1.6 s of every 2 s) and
    flat unless `pages_spike_s` spikes it too in the same interval (its line is higher: level 2)."""
    spikes_at = (74.0, 76.0)  # both in the interval [72, 82) counted from the first batch at 42
    main = StageView(
        "main",
        2,
        batches(
            channels=2,
            stage_s=0.5,
            rows_in=400,
            rows_out=200,
            every_s=2.0,
            count=30,
            spikes=dict.fromkeys(spikes_at, 3.0),
        ),
    )
    pages_spikes = dict.fromkeys(spikes_at, pages_spike_s) if pages_spike_s is not None else None
    pages = StageView(
        "pages",
        2,
        batches(channels=2, stage_s=1.6, rows_in=200, rows_out=200, every_s=2.0, count=30, spikes=pages_spikes),
    )
    return job(main, pages)


def test_as_stream_grows_the_stage_with_the_highest_bottleneck_level_not_the_busiest():
    snapshot = spiky_chain()
    assert snapshot.of("pages").busy_share(60.0, NOW) > snapshot.of("main").busy_share(60.0, NOW)
    # pages: 0.5 x 100 = 50 rows/s at 200 / (1.6 x 2) = 62.5 rows/s per channel: its 2 channels suffice.
    decisions = decide(as_stream(), congested(100.0), snapshot)
    assert moves(decisions) == {"main": (2, 4, "as-stream-plan")}  # Eq. 9, level 1: (1 + 1) / 1 x 2
    assert decisions["main"].decision.signals["level"] == 1.0


def test_as_stream_sizes_eq_9_with_the_bottleneck_level():
    # Both stages spike; pages' line lies higher, so pages is level 2 and main level 1: (1 + 2) / 1 x 2 = 6.
    decisions = decide(as_stream(), congested(100.0), spiky_chain(pages_spike_s=1.95))
    assert moves(decisions) == {"pages": (2, 6, "as-stream-plan")}
    assert decisions["pages"].decision.signals["level"] == 2.0


def test_as_stream_plan_gives_the_bottleneck_the_larger_of_eq_9_and_its_pre_scale():
    # pages (2 channels, busy 25% > main's 20%) ranks first. Arrival 300: pre-scaled to
    # ceil(150 / 56) = 3; Eq. 9 on its 2 channels gives 4, more: 2 -> 4 by the plan.
    decisions = decide(as_stream(), congested(300.0), chain(pages_channels=2))
    assert moves(decisions) == {"pages": (2, 4, "as-stream-plan")}


def test_as_stream_plan_grows_the_next_stage_when_the_pre_scale_already_exceeds_eq_9():
    # pages (1 channel, busy 50%) ranks first. Arrival 400: pre-scaled to 4 > Eq. 9's 2, so the
    # pre-scale stands and the plan grows the next-ranked stage, main: 2 -> 4.
    decisions = decide(as_stream(), congested(400.0), chain(pages_channels=1))
    assert moves(decisions) == {"pages": (1, 4, "as-stream-predict"), "main": (2, 4, "as-stream-plan")}


def test_as_stream_shrinks_a_quiet_stage_to_the_channels_its_predicted_input_needs():
    # pages measures 200 rows/s on 4 channels (50% of 4 x 100: a measured-input rule keeps them), but
    # only 0.5 x 100 = 50 rows/s are predicted: 12.5% < 35%, so 4 -> ceil(50 / 56) = 1.
    # main (1 channel) is predicted 100 rows/s of its 1000 / 2 = 500: already at the minimum.
    snapshot = chain(main_channels=1, pages_channels=4, rows_per_s=200.0)
    decisions = decide(as_stream(), quiet(100.0), snapshot)
    assert moves(decisions) == {"pages": (4, 1, "as-stream-shrink")}
    assert decisions["pages"].decision.action == "scale_in"
    assert decisions["pages"].decision.signals["utilization"] == pytest.approx(0.125)
    # Not quiet (the underload window not yet full): nothing shrinks.
    assert decide(as_stream(), quiet(100.0, ready_down=False), snapshot) == {}


def test_as_stream_shrinks_only_below_the_scale_in_utilization():
    # 0.5 x 100 = 50 rows/s on 2 channels of 100: 25%; with the default 35% -> ceil(50 / 56) = 1,
    # with 20% nothing, although 1 channel would do.
    snapshot = chain(main_channels=1, pages_channels=2, rows_per_s=100.0)
    assert moves(decide(as_stream(), quiet(100.0), snapshot)) == {"pages": (2, 1, "as-stream-shrink")}
    assert decide(as_stream(scale_in_utilization=0.2), quiet(100.0), snapshot) == {}


# ------------------------------------------------------------------ ReactivePolicy
@pytest.mark.parametrize(
    ("channels", "busy_s", "expected"),
    [(4, 9.0, 6), (2, 5.0, 3)],
    ids=["by busy share: ceil(4 x 0.9 / 0.7) = 6", "at least one more: ceil(2 x 0.5 / 0.7) = 2 < 3"],
)
def test_reactive_grows_the_busiest_stage_when_congested(channels: int, busy_s: float, expected: int):
    pages = StageView("pages", channels, batches(channels=channels, stage_s=busy_s, rows_in=500, rows_out=500))
    snapshot = job(main_stage(2), pages)  # main busy 2 s of 10 = 20%
    decisions = decide(ReactivePolicy(StagesOptions(policy="reactive")), congested(100.0), snapshot)
    assert moves(decisions) == {"pages": (channels, expected, "reactive")}
    assert decisions["pages"].decision.signals["busy_share"] == pytest.approx(busy_s / 10.0)


def test_reactive_never_pre_scales_a_rising_arrival_that_as_stream_does():
    snapshot = chain(pages_channels=1)
    evaluation = quiet(400.0, ready_down=False)  # keeps up for now; the arrival has just risen
    assert decide(ReactivePolicy(StagesOptions(policy="reactive")), evaluation, snapshot) == {}
    assert moves(decide(as_stream(), evaluation, snapshot)) == {"pages": (1, 4, "as-stream-predict")}


def test_reactive_shrinks_on_measured_not_predicted_input():
    # The same job as_stream shrinks 4 -> 1 on its prediction: measured 200 rows/s use 50% of pages.
    snapshot = chain(main_channels=1, pages_channels=4, rows_per_s=200.0)
    assert decide(ReactivePolicy(StagesOptions(policy="reactive")), quiet(100.0), snapshot) == {}
    # Measured 50 rows/s on 4 channels (12.5%) -> ceil(50 / (100 x 0.56)) = 1.
    light = chain(main_channels=1, pages_channels=4, rows_per_s=50.0)
    assert moves(decide(ReactivePolicy(StagesOptions(policy="reactive")), quiet(100.0), light)) == {
        "pages": (4, 1, "reactive-shrink")
    }
    # Not quiet (the underload window not yet full): nothing shrinks.
    assert decide(ReactivePolicy(StagesOptions(policy="reactive")), quiet(100.0, ready_down=False), light) == {}


# ------------------------------------------------------------------ TogetherPolicy
def test_together_gives_every_stage_that_differs_the_controllers_target():
    controller_options = ControllerOptions()
    evaluation = make_evaluation(4, congested=True, throughput_rps=4000.0, input_rate_rps=8000.0)
    expected_state, expected = ScalingController(controller_options).decide(ControllerState(), evaluation, NOW)
    assert expected.is_rescale and expected.to_channels == 6  # P1: one level up from 4
    target = expected.to_channels

    def at(name: str, channels: int) -> StageView:
        return StageView(name, channels, batches(channels=channels, stage_s=1.0, rows_in=100, rows_out=100))

    snapshot = job(at("main", 4), at("pages", 2), at("sink", target))
    state, decisions = TogetherPolicy(controller_options).decide(ControllerState(), evaluation, snapshot, NOW)
    assert {d.stage: (d.decision.from_channels, d.decision.to_channels) for d in decisions} == {
        "main": (4, target),
        "pages": (2, target),
    }
    assert {d.decision.rule for d in decisions} == {f"together-{expected.rule}"}
    assert {d.decision.action for d in decisions} == {"scale_out"}
    assert state.cooldown_until_s == expected_state.cooldown_until_s  # the controller's state is kept


def test_together_decides_nothing_when_the_controller_keeps_the_stream():
    snapshot = chain()
    state, decisions = TogetherPolicy(ControllerOptions()).decide(ControllerState(), make_evaluation(2), snapshot, NOW)
    assert decisions == () and state.cooldown_until_s is None


# ------------------------------------------------------------------ StagesLoop
class ChainCollector:
    """A `JobCollector` replaying the two-stage chain with a scripted arrival rate and Kafka lag per
    tick (the last repeats); the batches always end at the tick's time, as a live job's would."""

    def __init__(self, arrivals_rps: Sequence[float], lags: Sequence[float] = (0.0,), pages_channels: int = 1):
        self.arrivals_rps = list(arrivals_rps)
        self.lags = list(lags)
        self.pages_channels = pages_channels
        self.collected = 0

    def collect(self, now_s: float) -> JobSnapshot:
        arrival = self.arrivals_rps[min(self.collected, len(self.arrivals_rps) - 1)]
        lag = self.lags[min(self.collected, len(self.lags) - 1)]
        self.collected += 1
        main, pages = main_stage(2, now_s), pages_stage(self.pages_channels, end_s=now_s)
        return JobSnapshot(stream(now_s, main.channels, arrival, lag), (main, pages))


class FailingRealizer:
    def __init__(self) -> None:
        self.calls = 0

    def apply(self, decisions: Sequence[StageDecision]) -> None:
        self.calls += 1
        raise RuntimeError("rescale run could not be requested")


CONTROL = ControlOptions()


def stages_loop(
    collector: ChainCollector, realizer: object, clock: ManualClock, state: StagesLoopState | None = None, **options
) -> StagesLoop:
    return StagesLoop(StagesOptions(**options), CONTROL, collector, realizer, clock, state)  # type: ignore[arg-type]


def test_loop_realizes_a_pre_scale_and_restarts_its_windows():
    clock, realizer = ManualClock(NOW), RecordingStagesRealizer()
    loop = stages_loop(ChainCollector([400.0]), realizer, clock)
    decided = loop.tick()
    assert [(d.stage, d.decision.from_channels, d.decision.to_channels) for d in decided] == [("pages", 1, 4)]
    assert realizer.ticks == [decided]
    assert loop.state.cooldown_until_s == NOW + 10.0
    assert loop.state.windows is not None and loop.state.windows.periods_seen == 0
    assert loop.last_evaluation is not None and loop.last_evaluation.input_rate_rps == 400.0


def test_loop_decides_nothing_for_cooldown_s_after_a_realized_rescale():
    clock, realizer = ManualClock(NOW), RecordingStagesRealizer()
    loop = stages_loop(ChainCollector([400.0]), realizer, clock, cooldown_s=10.0)
    assert loop.tick()  # the recording realizer changes nothing: pages still has 1 channel
    for _ in range(9):
        clock.advance(1.0)
        assert loop.tick() == ()
        # Evaluation goes on while cooling down: the windows saw this tick's snapshot.
        assert loop.state.windows is not None and loop.state.windows.last_time_s == clock.now()
    assert loop.state.cooldown_until_s == NOW + 10.0
    clock.advance(1.0)  # NOW + 10: the cooldown is over
    assert loop.tick()
    assert len(realizer.ticks) == 2


def test_loop_without_cooldown_decides_again_the_next_tick():
    clock, realizer = ManualClock(NOW), RecordingStagesRealizer()
    loop = stages_loop(ChainCollector([400.0]), realizer, clock, cooldown_s=0.0)
    loop.tick()
    clock.advance(1.0)
    loop.tick()
    assert len(realizer.ticks) == 2


def test_a_failing_realizer_leaves_the_state_unchanged_so_the_next_tick_decides_again():
    clock, realizer = ManualClock(NOW), FailingRealizer()
    loop = stages_loop(ChainCollector([100.0, 100.0, 400.0]), realizer, clock)
    loop.tick()
    clock.advance(1.0)
    loop.tick()
    before = loop.state_json()
    clock.advance(1.0)
    with pytest.raises(RuntimeError):
        loop.tick()
    assert loop.state_json() == before
    assert loop.state.cooldown_until_s is None
    clock.advance(1.0)
    with pytest.raises(RuntimeError):
        loop.tick()  # not cooling down: it decides (and tries) again
    assert realizer.calls == 2


def test_loop_grows_the_busiest_stage_once_the_streams_lag_keeps_growing():
    # The arrival fits (no pre-scale); the lag grows 4000 records a tick. The congestion and overload
    # windows (3 periods) fill at the third tick: congested, pages (busiest) doubles 1 -> 2 by Eq. 9.
    clock, realizer = ManualClock(NOW), RecordingStagesRealizer()
    loop = stages_loop(ChainCollector([100.0], lags=[0.0, 4000.0, 8000.0, 12000.0]), realizer, clock)
    assert loop.tick() == ()
    clock.advance(1.0)
    assert loop.tick() == ()
    clock.advance(1.0)
    decided = loop.tick()
    assert loop.last_evaluation is not None and loop.last_evaluation.ready_up and loop.last_evaluation.congested
    assert [(d.stage, d.decision.from_channels, d.decision.to_channels, d.decision.rule) for d in decided] == [
        ("pages", 1, 2, "as-stream-plan")
    ]
    assert realizer.ticks == [decided]


def test_state_round_trips_through_json_with_its_windows_and_cooldown():
    clock = ManualClock(NOW)
    loop = stages_loop(ChainCollector([100.0], lags=[0.0, 50.0, 20.0]), RecordingStagesRealizer(), clock)
    for _ in range(3):
        assert loop.tick() == ()
        clock.advance(1.0)
    windows = loop.state.windows
    assert windows is not None and windows.periods_seen == 3
    saved = StagesLoopState(windows, loop.state.controller, cooldown_until_s=NOW + 20.0)

    text = saved.to_json()
    restored = StagesLoopState.from_json(text, CONTROL)
    assert restored.cooldown_until_s == NOW + 20.0
    assert restored.windows is not None
    assert restored.windows.periods_seen == 3 and restored.windows.last_time_s == windows.last_time_s
    np.testing.assert_array_equal(restored.windows.lag, windows.lag)
    np.testing.assert_array_equal(restored.windows.input_rate, windows.input_rate)
    np.testing.assert_array_equal(restored.windows.throughput, windows.throughput)
    assert restored.to_json() == text

    fresh = StagesLoopState.from_json(None, CONTROL)
    assert fresh.windows is None and fresh.cooldown_until_s is None
    assert StagesLoopState.from_json("", CONTROL).cooldown_until_s is None


def test_a_loop_restored_from_json_keeps_cooling_down():
    clock, realizer = ManualClock(NOW), RecordingStagesRealizer()
    first = stages_loop(ChainCollector([400.0]), realizer, clock)
    assert first.tick()
    cursor = first.state_json()  # what a sensor keeps between evaluations

    clock.advance(5.0)
    second = stages_loop(ChainCollector([400.0]), realizer, clock, StagesLoopState.from_json(cursor, CONTROL))
    assert second.tick() == ()
    clock.advance(5.0)
    assert second.tick()
    assert len(realizer.ticks) == 2


@pytest.mark.parametrize("scale_in", [0.7, 0.8])
def test_loop_refuses_a_scale_in_utilization_not_below_the_target(scale_in: float):
    options = StagesOptions(scale_in_utilization=scale_in, asstream=AsStreamOptions(target_utilization=0.7))
    with pytest.raises(ValueError, match="scale_in_utilization"):
        StagesLoop(options, CONTROL, ChainCollector([100.0]), RecordingStagesRealizer(), ManualClock())
    below = StagesOptions(scale_in_utilization=0.69, asstream=AsStreamOptions(target_utilization=0.7))
    StagesLoop(below, CONTROL, ChainCollector([100.0]), RecordingStagesRealizer(), ManualClock())  # accepted


@pytest.mark.parametrize(
    ("policy", "kind"), [("as-stream", AsStreamPolicy), ("reactive", ReactivePolicy), ("together", TogetherPolicy)]
)
def test_loop_runs_the_policy_its_options_name(policy: str, kind: type):
    loop = stages_loop(ChainCollector([100.0]), RecordingStagesRealizer(), ManualClock(), policy=policy)
    assert isinstance(loop.policy, kind)


def test_evaluation_congested_is_lag_congestion_or_overload_not_draining():
    # What the policies' "congested" rests on (Evaluation.congested), on one evaluation varied.
    base = make_evaluation(2, ready_up=True)
    assert not base.congested
    assert replace(base, congestion=replace(base.congestion, congested=True)).congested
    overloaded = replace(base, overloaded=np.array([True, False]))
    assert overloaded.congested
    assert not replace(overloaded, congestion=replace(base.congestion, draining=True)).congested


def test_stage_batches_take_the_first_interval_when_it_is_known():
    made = stage_batches([10.0, 13.0], [0.5, 0.5], [(10, 5), (20, 10)], [1, 1], first_interval_s=2.0)
    assert [b.interval_s for b in made] == [2.0, 3.0]
