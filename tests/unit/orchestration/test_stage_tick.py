"""The multi-stage tick on a real stream's readings (a scripted one here): each stage's metrics
records become its batches, and the loop's decisions become one `scale_to` target per stage,
handed on together. As-Stream pre-scales the downstream stage from the arrival rate and the first
stage's selectivity before the job is congested; the reactive policy, on the same readings, waits."""

from __future__ import annotations

import math

from elasticity.control.asstream import StagesOptions
from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.elasticity.stage_tick import StageRescale, decide_stages_tick, stage_view
from pipelines.streams.control import RescaleTarget
from pipelines.streams.metrics import BatchMetrics
from tests.fakes.elasticity_stream import FakeStream, as_first_of_two_stages, downstream_batches

POLICY = ElasticityPolicy(slo_s=5.0, sample_period_s=10.0, probe_timeout_s=30.0, max_channels=8)
DOWNSTREAM_ROWS_PER_S = 200.0
"""What one channel of the downstream stage gets through (its batches below: 800 rows in 4 s)."""


FIRST_STAGE_BUSY = 0.25
"""Share of the wall time the first stage is busy (0.5 s of its own work in every 2 s batch)."""


def _downstream(stream: FakeStream) -> list[BatchMetrics]:
    return downstream_batches(stream, "buckets", DOWNSTREAM_ROWS_PER_S)


def _steady_job(rate_rps: float) -> FakeStream:
    """A first stage that keeps up (no lag, fast probes) and passes every row on."""
    return as_first_of_two_stages(FakeStream(channels=(0,)).run(60, rate_rps, 0.5), FIRST_STAGE_BUSY)


def _tick(policy: str, stream: FakeStream) -> tuple[list[tuple[StageRescale, ...]], object]:
    handed: list[tuple[StageRescale, ...]] = []
    outcome = decide_stages_tick(
        None, stream.read(), {"buckets": _downstream(stream)}, POLICY, StagesOptions(policy=policy), handed.append
    )
    return handed, outcome


def test_a_stage_view_is_its_batches_in_time_order_with_intervals_and_own_time() -> None:
    stream = _steady_job(400.0)
    view = stage_view("buckets", list(reversed(_downstream(stream))))
    assert view.channels == 1 and [b.time_s for b in view.batches] == sorted(b.time_s for b in view.batches)
    second = view.batches[1]
    assert second.interval_s == 2.0 and second.rows_in == 800 and second.stage_s == 4.0
    assert view.capacity_per_channel_rps(60, stream.now_s) == DOWNSTREAM_ROWS_PER_S


def test_as_stream_pre_scales_the_downstream_stage_before_the_job_is_congested() -> None:
    handed, outcome = _tick("as-stream", _steady_job(400.0))
    assert not outcome.congested
    # Eq. 10-11: sel 1 x 400 rows/s arriving; the stage may use 70% of the time the first stage leaves.
    needed = math.ceil(400.0 / (DOWNSTREAM_ROWS_PER_S * 0.7 * (1 - FIRST_STAGE_BUSY)))
    assert needed == 4
    assert len(handed) == 1 and len(handed[0]) == 1
    rescale = handed[0][0]
    assert (rescale.stage, rescale.rule, rescale.from_channels) == ("buckets", "as-stream-predict", 1)
    assert rescale.target == RescaleTarget(op="scale_to", channels=needed)
    assert outcome.rescales == handed[0]


def test_the_reactive_policy_waits_for_congestion_on_the_same_readings() -> None:
    handed, outcome = _tick("reactive", _steady_job(400.0))
    assert handed == [] and outcome.rescales == () and outcome.skip_reason == "reactive: no stage to rescale"


def test_no_pre_scale_when_the_downstream_stage_carries_the_predicted_input() -> None:
    handed, _ = _tick("as-stream", _steady_job(100.0))  # 100 rows/s < 0.7 x 0.75 x 200
    assert handed == []


def test_the_outcome_says_when_the_job_was_congested() -> None:
    """A first stage falling behind (lag growing by 4,000 records a period, probes late): the ticks
    report congestion once the windows are full, and the reactive policy then grows a stage."""
    stream, cursor, seen = FakeStream(channels=(0,)), None, []
    lag = iter(range(1000, 100_000, 4000))
    for _ in range(5):
        as_first_of_two_stages(stream.run(10, 400, 12.0, lag_records=next(lag)), FIRST_STAGE_BUSY)
        outcome = decide_stages_tick(
            cursor, stream.read(), {"buckets": _downstream(stream)}, POLICY, StagesOptions(policy="reactive"), list
        )
        cursor = outcome.cursor
        seen.append((outcome.congested, [r.rule for r in outcome.rescales]))
    assert seen[0] == (False, [])
    assert (True, ["reactive"]) in seen


def test_no_decision_until_a_later_stage_reports_a_batch_of_its_committed_layout() -> None:
    """Right after a rescale of stage buckets its newest batch still ran on the old layout: a decision
    on that channel count would undo the rescale, so the tick waits (and says why)."""
    stream = _steady_job(400.0)
    handed: list = []
    waiting = decide_stages_tick(
        None, stream.read(), {"buckets": _downstream(stream)}, POLICY, StagesOptions(), handed.append, {"buckets": 1}
    )
    assert handed == [] and waiting.rescales == ()
    assert waiting.skip_reason == (
        "waiting for the first batch of stage buckets on layout epoch 1 (its newest batch ran on epoch 0)"
    )
    silent = decide_stages_tick(None, stream.read(), {"buckets": []}, POLICY, StagesOptions(), handed.append)
    assert handed == [] and "no metrics yet from stage buckets" in (silent.skip_reason or "")
    ready = decide_stages_tick(
        None, stream.read(), {"buckets": _downstream(stream)}, POLICY, StagesOptions(), handed.append, {"buckets": 0}
    )
    assert len(ready.rescales) == 1
