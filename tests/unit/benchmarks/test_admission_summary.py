"""The admission benchmark's figures from a mode's batches: the longest batch once the overload is
handled, cap changes per phase, query restarts."""

from __future__ import annotations

from benchmarks.admission import BatchPoint, ModeResult


def _batch(batch_id: int, start_s: float, duration_s: float, cap: int | None = None, rule: str | None = None):
    return BatchPoint(batch_id, start_s, duration_s, admitted=100, cap=cap, rule=rule, restart_ms=None)


def _mode(mode: str, batches: list[BatchPoint]) -> ModeResult:
    return ModeResult(mode=mode, step_at_s=10.0, overload_end_s=40.0, sent_lines={}, batches=batches)


def test_with_admission_the_longest_batch_is_counted_after_the_first_cap():
    batches = [_batch(0, 1, 0.5), _batch(1, 11, 9.0, cap=300, rule="cap"), _batch(2, 21, 3.2, cap=300, rule="hold")]
    batches += [_batch(3, 25, 2.9, cap=210, rule="lower")]
    result = _mode("admission", batches)
    assert result.first_capped_batch() == 1
    assert result.max_batch_s() == 3.2  # the 9 s batch that set the cap is not counted
    assert result.cap_changes(0.0, result.step_at_s) == 0
    assert result.cap_changes(result.step_at_s, result.overload_end_s) == 1  # 300 → 210


def test_without_admission_every_batch_after_the_step_counts():
    result = _mode("none", [_batch(0, 1, 0.5), _batch(1, 8, 4.0), _batch(2, 12, 30.0)])
    assert result.max_batch_s() == 30.0
    assert result.summary()["cap_changes_steady"] == 0
