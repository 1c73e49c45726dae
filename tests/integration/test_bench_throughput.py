"""The throughput benchmark harness on a tiny pre-loaded topic: both systems consume it, both
equal the oracle, the ratio and outputs are produced."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_throughput_harness_runs_both_systems_and_checks_them(spark, bootstrap, tmp_path):
    from orchestration.cli.bench_throughput import plot_throughput, throughput_table
    from pipelines.bench.throughput import ThroughputOptions, preload_topic, run_throughput_benchmark

    options = ThroughputOptions(
        records=3000, partitions=2, repetitions=1, max_offsets_per_trigger=1000, vocabulary=300, producer_processes=1,
        timeout_s=300, workdir=str(tmp_path),
    )
    topic = preload_topic(bootstrap, options)
    results = run_throughput_benchmark(spark, bootstrap, options, topic)
    assert {r["system"] for r in results["runs"]} == {"esp", "native"}
    assert results["correct"] is True
    assert all(r["correctness"]["expected_keys"] == r["correctness"]["result_keys"] > 0 for r in results["runs"])
    assert all(r["batches"] >= 3 for r in results["runs"])  # 3000 records, at most 1000 a batch
    assert results["ratio"] == pytest.approx(results["elastic_records_per_s"] / results["native_records_per_s"])
    plot_throughput(results, tmp_path / "tp.png")
    assert (tmp_path / "tp.png").stat().st_size > 0
    assert throughput_table(results).row_count == 4
