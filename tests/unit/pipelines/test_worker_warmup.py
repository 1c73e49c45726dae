"""A fresh Python worker's start is done once, first, and timed apart from the rebuild it precedes."""

from __future__ import annotations

import pytest

from elasticity.state.store import RestoreTiming
from pipelines import elastic_stage
from pipelines.streams.metrics import RebuildReport


def test_the_worker_warms_once_and_reports_it_only_then(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(elastic_stage, "_WORKER_WARM", False)
    first = elastic_stage.warm_worker()
    assert first is not None and first >= 0
    assert elastic_stage.warm_worker() is None


def test_a_rebuild_in_a_fresh_worker_carries_its_start() -> None:
    timing = RestoreTiming(snapshot_entries=10, snapshot_bytes=400, restore_s=0.02, changelog_entries=5, fold_s=0.01)
    assert RebuildReport.of(timing, 0.9).fixed_ms == pytest.approx(900.0)
    assert RebuildReport.of(timing).fixed_ms is None
