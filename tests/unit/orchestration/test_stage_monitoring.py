"""A multi-stage job's per-stage metrics become As-Stream's monitoring samples (the stage's own time
in the batch as its latency, rows in and out per second of the batch's interval), and As-Stream's
identification on them names the stage whose own time spikes above its trend as the bottleneck,
not the one that is merely slow."""

from __future__ import annotations

import pytest

from elasticity.control.asstream import AsStreamOptions, identify_bottlenecks, mean_selectivity
from orchestration.elasticity.stage_tick import stage_view
from pipelines.streams.metrics import BatchMetrics

NOW = 1_100.0


def _batch(stage: str, batch_id: int, stage_ms: float | None, rows_in: int = 100, rows_out: int = 50) -> BatchMetrics:
    """One batch a second, each 900 ms long."""
    return BatchMetrics(
        stream="s",
        batch_id=batch_id,
        epoch=0,
        channels=2,
        wall_time=1_000.0 + batch_id,
        input_records=rows_in,
        batch_ms=900.0,
        stage=stage,
        output_rows=rows_out,
        stage_ms=stage_ms,
    )


def test_a_batch_is_a_sample_of_its_stages_own_time_and_rows_per_second():
    view = stage_view("pages", [_batch("pages", 4, 250.0, 80, 20), _batch("pages", 3, 250.0, 90, 30)])
    (first, second) = view.rates(200.0, NOW).samples
    # The first batch stands for its whole 0.9 s; the next for the second since the first ended.
    assert (first.time_s, first.mean_latency_s, first.rows_in) == (1_003.0, 0.25, 100.0)
    assert first.rows_out == pytest.approx(30 / 0.9)
    assert (second.time_s, second.rows_in, second.rows_out) == (1_004.0, 80.0, 20.0)
    assert second.rows_queued_out == 0  # within a batch, the next stage takes the rows at once
    without_own_time = stage_view("main", [_batch("main", 3, stage_ms=None)])
    assert without_own_time.batches[0].stage_s == 0.9  # the batch's duration


def test_a_stages_view_is_in_time_order_and_refuses_another_stages_records():
    view = stage_view("pages", [_batch("pages", 2, 10.0), _batch("pages", 1, 20.0)])
    assert [b.time_s for b in view.batches] == [1_001.0, 1_002.0]
    with pytest.raises(ValueError, match="main"):
        stage_view("pages", [_batch("pages", 1, 10.0), _batch("main", 2, 10.0)])


def test_the_stage_whose_own_time_spikes_is_ranked_the_bottleneck_and_selectivity_is_rows_out_over_in():
    options = AsStreamOptions()
    # `main` is steadily slow (its own time flat at 400 ms); `pages` is fast with spikes above its trend.
    main = stage_view("main", [_batch("main", b, 400.0) for b in range(30)]).rates(200.0, NOW)
    spikes = {7: 900.0, 8: 1_000.0, 17: 950.0, 18: 1_100.0, 27: 1_000.0}
    pages = stage_view("pages", [_batch("pages", b, spikes.get(b, 100.0), 50, 10) for b in range(30)])
    report = identify_bottlenecks([main, pages.rates(200.0, NOW)], options)
    assert report.bottleneck_stage == "pages" and report.ranking[0] == "pages"
    assert mean_selectivity(pages.rates(200.0, NOW), options) == pytest.approx(0.2)
