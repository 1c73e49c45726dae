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
