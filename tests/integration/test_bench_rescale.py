"""The rescale benchmark harness on tiny state: both systems rescale, both results are checked
against the oracle, the figures and outputs are produced — and the check catches a wrong count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.streams.names import checkpoint_path, results_table_path

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tiny_run(spark, bootstrap, tmp_path_factory):
    from benchmarks.rescale import RescaleOptions, run_rescale_benchmark

    workdir = tmp_path_factory.mktemp("bench-rescale")
    options = RescaleOptions(
        keys=(1500,),
        from_channels=3,
        to_channels=4,
        words_per_line=50,
        warm_batches=1,
        trickle_lines_per_s=50,
        chunk_lines=20,
        trigger_seconds=0.3,
        timeout_s=300,
        workdir=str(workdir),
    )
    steps: list[str] = []
    results = run_rescale_benchmark(spark, bootstrap, options, steps.append)
    return results, steps, workdir


def test_both_systems_rescale_and_equal_the_oracle(tiny_run):
    from benchmarks.rescale import STEPS_PER_SIZE
    from pipelines.native import state_partitions

    results, steps, workdir = tiny_run
    assert len(steps) == STEPS_PER_SIZE
    size = results["sizes"][0]
    assert size["keys"] == 1500
    assert size["esp_correct"] is True and size["native_correct"] is True
    assert size["esp_pause_s"] > 0 and size["native_pause_s"] > 0
    assert size["pause_ratio"] == pytest.approx(size["native_pause_s"] / size["esp_pause_s"])
    esp, native = results["details"][0]["esp"], results["details"][0]["native"]
    assert esp["channels"] == [3, 4] and esp["keys_total"] == 1500
    assert 0 < esp["keys_moved"] < 1500 and esp["bytes_moved"] > 0
    assert size["ideal_fraction"] == pytest.approx(0.25)
    assert set(esp["phase_ms"]) >= {"donate", "vertical_barrier", "collect", "commit"}
    assert state_partitions(checkpoint_path(workdir / native["topic"])) == 4
    assert native["state_rows_rewritten"] in (None, 1500)


def test_the_correctness_check_fails_on_a_wrong_count(tiny_run, spark, bootstrap):
    from benchmarks.spark_runs import check_results

    results, _, workdir = tiny_run
    topic = results["details"][0]["esp"]["topic"]
    table = Path(results_table_path(workdir / topic))
    assert check_results(spark, str(table), bootstrap, topic).ok
    # A later batch that reports one word's count off by one, and one word never seen.
    spark.createDataFrame(
        [("k7", 999, 0, 10_000), ("not-a-key", 1, 0, 10_000)], "word string, count long, channel int, batch_id long"
    ).write.mode("overwrite").parquet(f"{table}/batch_id=10000")
    check = check_results(spark, str(table), bootstrap, topic)
    assert not check.ok
    assert check.mismatched_keys == 2 and check.result_keys == check.expected_keys + 1


def test_cli_outputs_from_the_results(tiny_run, tmp_path):
    from benchmarks.rescale_command import parse_sizes, pause_table, plot_pauses

    results, _, _ = tiny_run
    assert parse_sizes("1e4, 1e5,2000") == (10_000, 100_000, 2000)
    with pytest.raises(ValueError):
        parse_sizes("many")
    plot_pauses(results, tmp_path / "pause.png")
    assert (tmp_path / "pause.png").stat().st_size > 0
    assert pause_table(results).row_count == 1
    json.dumps(results, default=str)
