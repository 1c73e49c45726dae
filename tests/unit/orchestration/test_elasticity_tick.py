"""The tick the sensor and the real-stack benchmark share runs one `ElasticLoop` with a real
stream's collector and realizer: a rescale is handed on once, with its target in layout channel
ids and its reason citing the SLO; a hand-on that fails leaves the loop's state as it was, so the
next tick decides the rescale again instead of cooling down after nothing happened."""

from __future__ import annotations

from elasticity.control import Decision
from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.elasticity.tick import decide_tick
from pipelines.streams.control import RescaleTarget
from tests.fakes.elasticity_stream import FakeStream

POLICY = ElasticityPolicy(slo_s=5.0, sample_period_s=10.0, probe_timeout_s=30.0, max_channels=8)


class Refused(RuntimeError):
    pass


def _overloaded_ticks(stream: FakeStream, hand_on, limit: int = 8):
    """Tick an overloaded stream (lag growing every period) until a tick rescales; its outcome."""
    cursor: str | None = None
    lag = iter(range(1000, 100_000, 4000))
    for _ in range(limit):
        stream.run(10, 400, 12.0, lag_records=next(lag))
        outcome = decide_tick(cursor, stream.read(), POLICY, hand_on)
        cursor = outcome.cursor
        if outcome.is_rescale:
            return outcome
    raise AssertionError("no rescale decided")


def test_a_rescale_is_handed_on_once_with_its_target_in_layout_ids_and_the_slo_cited():
    handed: list[tuple[Decision, RescaleTarget]] = []
    stream = FakeStream(channels=(3, 7))  # sparse ids, as after a merge
    outcome = _overloaded_ticks(stream, lambda decision, target: handed.append((decision, target)))
    assert handed == [(outcome.decision, outcome.target)]
    decision, target = handed[0]
    assert decision.rule.startswith("P1") and decision.reason.endswith("(SLO 5,000 ms)")
    assert target.op == "scale_to" and target.channels is not None and target.channels > 2


def test_a_failed_hand_on_propagates_and_the_next_tick_from_the_kept_cursor_decides_it_again():
    handed: list[Decision] = []

    def refuse_once(decision: Decision, target: RescaleTarget) -> None:
        handed.append(decision)
        if len(handed) == 1:
            raise Refused("the stream did not apply the request in time")

    stream, cursor = FakeStream(channels=(0, 1)), None
    lag = iter(range(1000, 100_000, 4000))
    for _ in range(8):
        stream.run(10, 400, 12.0, lag_records=next(lag))
        try:
            outcome = decide_tick(cursor, stream.read(), POLICY, refuse_once)
        except Refused:
            break  # the caller keeps the cursor it had
        cursor = outcome.cursor
    else:
        raise AssertionError("no rescale decided")
    stream.run(10, 400, 12.0, lag_records=next(lag))
    retried = decide_tick(cursor, stream.read(), POLICY, refuse_once)
    assert retried.is_rescale and len(handed) == 2
    assert retried.decision.action == handed[0].action == "scale_out"  # not a cooldown: nothing was committed
