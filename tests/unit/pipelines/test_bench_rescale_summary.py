"""The rescale benchmark's per-size summary over repeated runs: each system's median-pause run."""

from benchmarks.rescale import SizeResult


def _run(pause: float, ok: bool = True, **more) -> dict:
    return {"pause_s": pause, "correctness": {"ok": ok}, **more}


def test_the_summary_takes_each_systems_median_pause_run():
    size = SizeResult(
        1000,
        esp_runs=[
            _run(3.0, moved_fraction=0.3, ideal_fraction=0.25),
            _run(1.0, moved_fraction=0.1, ideal_fraction=0.25),
            _run(2.0, moved_fraction=0.2, ideal_fraction=0.25),
        ],
        native_runs=[_run(9.0), _run(7.0), _run(8.0)],
    )
    summary = size.summary()
    assert summary["esp_pause_s"] == 2.0 and summary["native_pause_s"] == 8.0
    assert summary["pause_ratio"] == 4.0
    assert summary["esp_moved_fraction"] == 0.2  # from the same (median) run as the pause
    assert summary["esp_pauses_s"] == [3.0, 1.0, 2.0] and summary["native_pauses_s"] == [9.0, 7.0, 8.0]
    assert summary["esp_correct"] is True and summary["native_correct"] is True


def test_an_even_count_takes_the_lower_median_and_one_wrong_run_fails_correctness():
    size = SizeResult(10, esp_runs=[_run(4.0), _run(1.0, ok=False)], native_runs=[_run(5.0), _run(6.0)])
    summary = size.summary()
    assert summary["esp_pause_s"] == 1.0 and summary["native_pause_s"] == 5.0
    assert summary["esp_correct"] is False and summary["native_correct"] is True


def test_every_runs_migration_snapshots_and_details_are_kept_in_run_order():
    def snapshot(batch: int) -> dict:
        return {"reported_with_batch": batch, "channel": 0, "batch_id": batch, "entries": 1, "write_ms": 1.0}

    esp_runs = [
        _run(3.0, batch_id=5, migration_ms=1500.0, snapshots=[snapshot(1), snapshot(3), snapshot(5)]),
        _run(1.0, batch_id=4, migration_ms=900.0, snapshots=[snapshot(1)]),
        _run(2.0, batch_id=6, migration_ms=1200.0, snapshots=[]),
    ]
    size = SizeResult(1000, esp_runs=esp_runs, native_runs=[_run(9.0), _run(7.0), _run(8.0)])
    summary = size.summary()
    assert summary["esp_migrations_s"] == [1.5, 0.9, 1.2]
    # The snapshot reported with the rescaling batch (5 in run 1) came after the pause began.
    assert summary["esp_snapshots_before_rescale"] == [2, 1, 0]
    details = size.details()
    assert details["esp"] is esp_runs[2] and details["native"]["pause_s"] == 8.0
    assert details["esp_runs"] == esp_runs and [r["pause_s"] for r in details["native_runs"]] == [9.0, 7.0, 8.0]
