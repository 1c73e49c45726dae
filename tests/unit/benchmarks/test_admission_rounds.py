"""`esp bench admission --repetitions`: the rescale schedule (several requests per run, alternating,
one at a time), each figure's median and spread over the rounds, the round plotted, the table."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from rich.console import Console

import benchmarks.admission as admission
from benchmarks.admission import (
    AdmissionBenchOptions,
    BatchPoint,
    ModeResult,
    Rescales,
    median_block,
    median_round,
    next_rescale_channels,
    rescale_times,
    round_document,
)
from benchmarks.admission_command import admission_table, plot_admission
from pipelines.streams.control import RescaleResult


def test_rescales_are_asked_from_the_first_time_then_every_period_while_the_overload_lasts():
    assert AdmissionBenchOptions().rescale_times() == [15.0, 25.0]  # the defaults: 30 s of overload
    assert rescale_times(0.0, 10.0, 30.0) == [0.0, 10.0, 20.0]  # none at the overload's end
    assert rescale_times(5.0, 10.0, 35.5) == [5.0, 15.0, 25.0, 35.0]
    assert rescale_times(15.0, None, 30.0) == [15.0]  # no period: the one request of old
    assert rescale_times(15.0, 0.0, 30.0) == [15.0]
    assert rescale_times(0.5, 0.1, 0.8) == [0.5, 0.6, 0.7]  # no float drift past the end
    with pytest.raises(ValueError, match="within the overload"):
        rescale_times(30.0, 10.0, 30.0)
    with pytest.raises(ValueError, match="negative"):
        rescale_times(1.0, -1.0, 30.0)


def test_the_targets_alternate_one_channel_more_and_back():
    assert [next_rescale_channels(2, committed) for committed in range(5)] == [3, 2, 3, 2, 3]


class FakeControl:
    """A ControlChannel that answers only when told to."""

    def __init__(self) -> None:
        self.sent: list = []
        self.results: dict[str, RescaleResult] = {}

    def request(self, request) -> None:
        if self.sent and self.sent[-1].request_id not in self.results:
            raise RuntimeError("a rescale request is already waiting for the stream")
        self.sent.append(request)

    def result(self, request_id: str) -> RescaleResult | None:
        return self.results.get(request_id)

    def answer(self, status: str = "committed") -> None:
        request_id = self.sent[-1].request_id
        self.results[request_id] = RescaleResult(request_id=request_id, status=status)

    def wait_for_result(self, request_id: str, timeout_s: float) -> RescaleResult:
        return self.results[request_id]


def test_a_rescale_due_while_the_previous_is_unanswered_is_skipped_not_sent():
    control, now = FakeControl(), iter(range(100, 200))
    rescales = Rescales(control, channels=2, clock=lambda: float(next(now)))
    rescales.ask()  # t=100: sent, to 3 channels
    rescales.ask()  # t=101: the first is unanswered: skipped
    assert [r.target.channels for r in control.sent] == [3]
    assert rescales.skipped == [101.0]
    control.answer("committed")
    rescales.ask()  # back to 2 channels
    control.answer("failed")  # the stage stays at 3: the next asks for 2 again
    rescales.ask()
    assert [r.target.channels for r in control.sent] == [3, 2, 2]
    assert [r.requested_at for r in rescales.requests] == [100.0, 102.0, 103.0]
    control.answer("committed")
    rescales.wait_for_answers(timeout_s=1.0)
    assert [a.status for a in rescales.answers.values()] == ["committed", "failed", "committed"]


def test_each_rescale_waits_until_the_start_of_the_batch_that_applied_it():
    control = FakeControl()
    rescales = Rescales(control, channels=2, clock=lambda: 100.0)
    rescales.ask()
    control.answer("committed")
    rescales.ask()
    control.answer("failed")
    first, second = (r.request_id for r in control.sent)

    def metrics(batch_id: int, ended: float, ms: float, request_id: str | None = None):
        rescale = {"request_id": request_id} if request_id else None
        return SimpleNamespace(batch_id=batch_id, wall_time=ended, batch_ms=ms, rescale=rescale)

    seen = [metrics(7, 110.0, 2_000, first), metrics(5, 104.0, 1_000), metrics(6, 106.5, 500, second)]
    assert rescales.waits(seen) == [8.0, None]  # batch 7 started at 108; the failed one applied nothing


def test_a_load_calls_every_scheduled_action_in_time_order(monkeypatch):
    class Trickle:
        def __init__(self, *args, sent: int = 0) -> None:
            self.sent = sent

        def start(self):
            return self

        def stop(self) -> None:
            self.sent += 10

    monkeypatch.setattr(admission, "Trickle", Trickle)
    called: list[str] = []
    sent = admission._load(
        "b",
        "t",
        1.0,
        0.05,
        AdmissionBenchOptions(),
        100,
        at=[(0.02, lambda: called.append("second")), (0.0, lambda: called.append("first"))],
    )
    assert called == ["first", "second"] and sent == 10


def _batch(batch_id: int, start_s: float, duration_s: float, cap: int | None = None, rule: str | None = None):
    return BatchPoint(batch_id, start_s, duration_s, admitted=100, cap=cap, rule=rule, restart_ms=None)


def _round(number: int, longest_with: float, longest_without: float, waits: list[float | None]) -> dict:
    capped = [_batch(0, 1, 0.5), _batch(1, 11, 9.0, cap=300, rule="cap"), _batch(2, 21, longest_with, 300, "hold")]
    with_admission = ModeResult("admission", 10.0, 40.0, {}, capped, [25.0, 35.0], [3, 2], waits)
    without = ModeResult("none", 10.0, 40.0, {}, [_batch(0, 1, 0.5), _batch(1, 12, longest_without)])
    without.rescale_waits_s = [longest_without / 2]
    for mode in (with_admission, without):
        mode.correctness = {"ok": number != 2 or mode.mode == "admission"}
    return round_document(number, [with_admission, without])


def _results() -> dict:
    rounds = [_round(1, 3.0, 40.0, [1.0, 3.0]), _round(2, 2.0, 70.0, [2.0, None]), _round(3, 2.5, 50.0, [0.5])]
    summaries = [r["modes"] for r in rounds]
    return {
        "options": AdmissionBenchOptions().__dict__,
        "capacity_lines_per_s": 200.0,
        "repetitions": len(rounds),
        "median": median_block(summaries),
        "rounds": rounds,
        "plotted_round": rounds[median_round(summaries)]["round"],
        "correct": all(r["correct"] for r in rounds),
        "batch_bound_s": 3.6,
    }


def test_a_round_keeps_each_modes_figures_waits_and_events():
    document = _round(1, 3.0, 40.0, [1.0, 3.0, None])
    summary = document["modes"]["admission"]
    assert summary["max_batch_s"] == 3.0 and summary["rescale_waits_s"] == [1.0, 3.0, None]
    assert summary["rescale_wait_s"] == 2.0  # the median of the waits measured
    assert summary["rescales_asked"] == 2 and summary["rescale_channels"] == [3, 2]
    assert summary["expected_rescale_wait_s"] == 1.5  # one 3 s batch counted: Σd²/2Σd
    assert document["events"]["admission"]["rescales_at_s"] == [25.0, 35.0]
    assert set(document["batches"]) == {"admission", "none"}


def shown(figure: dict) -> tuple:
    return figure["median"], figure["min"], figure["max"], figure["n"]


def test_the_median_block_gives_each_figure_per_mode_over_the_rounds():
    results = _results()
    with_admission, without = results["median"]["admission"], results["median"]["none"]
    assert shown(with_admission["max_batch_s"]) == (2.5, 2.0, 3.0, 3)
    assert shown(with_admission["rescale_wait_s"]) == (2.0, 0.5, 2.0, 3)  # per round: 2, 2, 0.5
    assert shown(with_admission["all_rescale_waits_s"]) == (1.5, 0.5, 3.0, 4)
    assert with_admission["cap_changes_steady"]["median"] == 0
    assert shown(without["max_batch_s"]) == (50.0, 40.0, 70.0, 3)
    assert without["expected_rescale_wait_s"]["n"] == 3
    assert (with_admission["correct_rounds"], without["correct_rounds"], without["rounds"]) == (3, 2, 3)
    assert results["correct"] is False
    json.dumps(results)  # the document is JSON as it is


def test_the_round_plotted_is_the_median_one_by_the_longest_batch_with_admission():
    assert _results()["plotted_round"] == 3  # 3.0, 2.0, 2.5 s: round 3's 2.5 s
    rounds = [{"admission": {"max_batch_s": v}} for v in (4.0, 1.0, None, 2.0)]
    assert median_round(rounds) == 3  # 1, 2, 4, None: the lower middle one, 2.0
    assert median_round([{"admission": {"max_batch_s": None}}]) == 0


def test_the_table_shows_medians_with_their_range_and_the_plot_renders(tmp_path):
    results = _results()
    console = Console(record=True, width=200)
    console.print(admission_table(results))
    text = console.export_text()
    assert "3 rounds: median [min–max]" in text
    assert "2.5 [2.0–3.0]" in text and "50.0 [40.0–70.0]" in text
    assert "2/3" in text and "3/3" in text
    plot_admission(results, tmp_path / "admission.png")
    assert (tmp_path / "admission.png").stat().st_size > 10_000
