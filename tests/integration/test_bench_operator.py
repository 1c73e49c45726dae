"""The operator benchmark on a small pre-loaded topic: esp's user job and Spark's
applyInPandasWithState (and transformWithStateInPandas, or its recorded error) consume it, their
final top pages per user equal the oracle, and the JSON, table and plot are produced."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_operator_benchmark_runs_esp_and_spark_and_checks_them(spark, bootstrap, tmp_path):
    from benchmarks.operator_bench import APPLY, ESP, TRANSFORM, OperatorOptions, preload_views, run_operator_benchmark
    from benchmarks.operator_command import operator_table, plot_operator

    options = OperatorOptions(
        records=20_000,
        users=500,
        pages=50,
        partitions=2,
        repetitions=1,
        max_offsets_per_trigger=5_000,
        warmup_records=0,
        timeout_s=240,
        workdir=str(tmp_path),
    )
    load = preload_views(bootstrap, options)
    results = run_operator_benchmark(spark, bootstrap, options, load)
    print(json.dumps({s: results["medians"][s]["wall"]["median"] for s in results["systems"]}))
    print(json.dumps({s: results["medians"][s]["busy"]["median"] for s in results["systems"]}))
    print(json.dumps(results["unavailable"]))

    assert results["correct"] is True
    assert {ESP, APPLY} <= set(results["systems"])
    # The optional third system either ran and was checked, or says why it did not.
    assert (TRANSFORM in results["systems"]) != (TRANSFORM in results["unavailable"])
    for run in results["runs"]:
        assert run["records_per_s"] > 0 and run["busy_records_per_s"] > 0
        assert run["batches"] >= 4  # 20k views, at most 5k a batch
        assert run["correctness"]["ok"] and run["correctness"]["result_users"] == len(load.expected)
    wall = {system: median["wall"]["median"] for system, median in results["medians"].items()}
    assert results["ratios"][f"{ESP}/{APPLY}"]["wall"] == pytest.approx(wall[ESP] / wall[APPLY])
    json.dumps(results)  # what the command writes
    plot_operator(results, tmp_path / "op.png")
    assert (tmp_path / "op.png").stat().st_size > 0
    assert operator_table(results).row_count == len(results["systems"]) + len(results["ratios"]) + len(results["runs"])
