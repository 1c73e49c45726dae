"""A multi-stage job's per-stage metrics become As-Stream's monitoring samples (the stage's own time
in the batch as its latency, rows in and out), and As-Stream's identification on them names the
stage whose own time spikes above its trend as the bottleneck, not the one that is merely slow."""

from __future__ import annotations

import pytest

from elasticity.control.asstream import AsStreamOptions, identify_bottlenecks, mean_selectivity
from orchestration.elasticity.stage_monitoring import chain_topology, stage_monitoring, stage_sample
from pipelines.streams.metrics import BatchMetrics


def _batch(stage: str, batch_id: int, stage_ms: float | None, rows_in: int = 100, rows_out: int = 50) -> BatchMetrics:
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


def test_a_batch_is_a_sample_of_its_stages_own_time_and_rows():
    sample = stage_sample(_batch("pages", 3, stage_ms=250.0, rows_in=80, rows_out=20))
    assert (sample.time_s, sample.mean_latency_s, sample.rows_in, sample.rows_out) == (1_003.0, 0.25, 80, 20)
    assert sample.rows_queued_out == 0  # within a batch, the next stage takes the rows at once
    assert stage_sample(_batch("main", 3, stage_ms=None)).mean_latency_s == 0.9  # the batch's duration


def test_a_stages_monitoring_is_in_time_order_and_refuses_another_stages_records():
    monitoring = stage_monitoring("pages", [_batch("pages", 2, 10.0), _batch("pages", 1, 20.0)])
    assert [s.time_s for s in monitoring.samples] == [1_001.0, 1_002.0]
    with pytest.raises(ValueError, match="main"):
        stage_monitoring("pages", [_batch("pages", 1, 10.0), _batch("main", 2, 10.0)])


def test_the_stage_whose_own_time_spikes_is_ranked_the_bottleneck_and_selectivity_is_rows_out_over_in():
    options = AsStreamOptions()
    # `main` is steadily slow (its own time flat at 400 ms); `pages` is fast with spikes above its trend.
    main = stage_monitoring("main", [_batch("main", b, 400.0) for b in range(30)])
    spikes = {7: 900.0, 8: 1_000.0, 17: 950.0, 18: 1_100.0, 27: 1_000.0}
    pages = stage_monitoring("pages", [_batch("pages", b, spikes.get(b, 100.0), 50, 10) for b in range(30)])
    report = identify_bottlenecks([main, pages], options)
    assert report.bottleneck_stage == "pages" and report.ranking[0] == "pages"
    assert mean_selectivity(pages, options) == pytest.approx(0.2)
    assert chain_topology(["main", "pages"]).topological_order() == ("main", "pages")
