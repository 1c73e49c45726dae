"""The throughput benchmark harness on a tiny pre-loaded topic: every system consumes it after
a warm-up, all equal the oracle, only esp-full archives, the ratios and outputs are produced."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.streams.names import bronze_table_path

pytestmark = pytest.mark.integration


def test_throughput_harness_runs_every_system_and_checks_them(spark, bootstrap, tmp_path):
    from benchmarks.throughput import ThroughputOptions, preload_topic, run_throughput_benchmark
    from benchmarks.throughput_command import plot_throughput, throughput_table

    options = ThroughputOptions(
        records=3000,
        partitions=2,
        repetitions=1,
        max_offsets_per_trigger=1000,
        vocabulary=300,
        producer_processes=1,
        timeout_s=300,
        workdir=str(tmp_path),
        warmup_records=500,
    )
    topic = preload_topic(bootstrap, options)
    warmup = preload_topic(bootstrap, options, records=options.warmup_records, prefix="bench-tp-warmup")
    results = run_throughput_benchmark(spark, bootstrap, options, topic, warmup_topic=warmup)
    assert [r["system"] for r in results["runs"]] == ["esp", "native", "esp-full"]
    assert {p.name.split(f"-{warmup}")[0] for p in tmp_path.glob(f"*{warmup}")} == {
        "esp--1",
        "native--1",
        "esp-full--1",
    }
    assert results["correct"] is True
    assert all(r["correctness"]["expected_keys"] == r["correctness"]["result_keys"] > 0 for r in results["runs"])
    assert all(r["batches"] >= 3 for r in results["runs"])  # 3000 records, at most 1000 a batch
    assert results["ratio"] == pytest.approx(results["elastic_records_per_s"] / results["native_records_per_s"])
    assert results["full_ratio"] == pytest.approx(
        results["elastic_full_records_per_s"] / results["native_records_per_s"]
    )
    assert not _bronze(tmp_path / f"esp-0-{topic}") and _bronze(tmp_path / f"esp-full-0-{topic}")
    plot_throughput(results, tmp_path / "tp.png")
    assert (tmp_path / "tp.png").stat().st_size > 0
    assert throughput_table(results).row_count == 8


def _bronze(root: Path) -> list[Path]:
    return list(Path(bronze_table_path(root)).rglob("*.parquet"))
