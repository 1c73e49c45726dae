"""The driver side of admission control: admitted records from Spark's offsets log, a planned
but unstarted batch forgotten (and only that), the controller's state kept across restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticity.admission import AdmissionOptions, BatchOutcome
from pipelines.streams.admission import AdmissionGate, admitted_records, batch_outcome, forget_unstarted_batch
from pipelines.streams.metrics import BatchMetrics
from tests.fakes.spark_checkpoint import write_checkpoint

TOPIC = "words"


def _checkpoint(tmp_path: Path, planned: list[dict[int, int]], committed: int) -> str:
    return write_checkpoint(tmp_path / "checkpoint", TOPIC, planned, committed)


def test_admitted_records_are_the_planned_offsets_minus_the_previous_batchs(tmp_path):
    checkpoint = _checkpoint(tmp_path, [{0: 10, 1: 5}, {0: 110, 1: 55}, {0: 110, 1: 60}], committed=1)
    assert admitted_records(checkpoint, 0, TOPIC) == 15  # from where the source began
    assert admitted_records(checkpoint, 1, TOPIC) == 150
    assert admitted_records(checkpoint, 2, TOPIC) == 5
    assert admitted_records(checkpoint, 3, TOPIC) is None


def test_a_planned_uncommitted_batch_nobody_began_is_forgotten(tmp_path):
    checkpoint = _checkpoint(tmp_path, [{0: 10}, {0: 20}, {0: 90_000}], committed=1)
    assert forget_unstarted_batch(checkpoint, holds=lambda batch: False) == 2
    assert sorted(p.name for p in (Path(checkpoint) / "offsets").iterdir()) == [".0.crc", ".1.crc", "0", "1"]
    assert forget_unstarted_batch(checkpoint, holds=lambda batch: False) is None  # all planned are committed


def test_a_batch_a_channel_began_is_never_forgotten(tmp_path):
    checkpoint = _checkpoint(tmp_path, [{0: 10}, {0: 20}], committed=0)
    assert forget_unstarted_batch(checkpoint, holds=lambda batch: batch == 1) is None
    assert (Path(checkpoint) / "offsets" / "1").exists()


def test_the_gate_keeps_its_cap_across_a_driver_restart(tmp_path):
    options = AdmissionOptions(high_watermark_s=2.0, low_watermark_s=0.5)
    gate = AdmissionGate(options, str(tmp_path / "control"))
    decision = gate.after_batch(BatchOutcome(batch_id=3, duration_s=8.0, admitted_records=40_000))
    assert decision.rule == "cap" and decision.cap_records == 10_000
    again = AdmissionGate(options, str(tmp_path / "control"))
    assert again.cap_records == 10_000 and again.state.cap_changes == 1


def test_watermarks_from_a_user_default_the_low_one_and_refuse_a_low_one_alone():
    assert AdmissionOptions.from_watermarks(None) is None
    options = AdmissionOptions.from_watermarks(5.0)
    assert options is not None and options.low_watermark_s == pytest.approx(2.0)
    with pytest.raises(ValueError, match="without a high one"):
        AdmissionOptions.from_watermarks(None, 1.0)


def test_the_results_compaction_is_not_counted_as_load():
    # Every 100 batches the batch also compacts the results tables: seconds that do not grow with
    # the records admitted, and no reason to lower the cap.
    metrics = BatchMetrics(stream="s", batch_id=100, epoch=0, channels=2, wall_time=0.0, batch_ms=6200.0)
    metrics.phase_ms = {"compact": 4000.0, "stage": 2000.0}
    outcome = batch_outcome(metrics, admitted=294)
    assert outcome.duration_s == 2.2 and outcome.admitted_records == 294


def test_a_rescale_at_the_batch_start_is_not_counted_as_load():
    # The migration of a rescale runs at the start of the batch that applies it; a cap lowered
    # for it would hold back the records the added channel is there to take.
    metrics = BatchMetrics(stream="s", batch_id=31, epoch=1, channels=3, wall_time=0.0, batch_ms=4000.0)
    metrics.phase_ms = {"rescale": 900.0, "stage": 2900.0}
    assert batch_outcome(metrics, admitted=640).duration_s == 3.1
