"""The elastic stage's JVM routing equals the layout's own lookup, and placement is exact."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.integration


def test_placement_labels_match_spark(spark):
    from pipelines.elastic_stage import placement_labels, spark_placement_labels

    for n in range(1, 13):
        assert placement_labels(n) == spark_placement_labels(spark, n), n


@pytest.mark.parametrize("change", ["uniform", "scale_out", "scale_in", "split"])
def test_jvm_route_equals_layout_lookup_and_places_each_channel_alone(spark, change):
    from pyspark.sql import functions as F

    from elasticity.hashing import hash_str
    from elasticity.layout import Layout
    from pipelines.elastic_stage import placement_labels, route

    base = Layout.uniform(4)
    layout = {"uniform": base, "scale_out": base.scale_out(1), "scale_in": base.scale_in(1), "split": base.split(2)}[
        change
    ]
    words = [f"w{i}" for i in range(5000)] + ["", "é", "日本語"]
    frame = spark.createDataFrame([(w,) for w in words], "key string").selectExpr("*", "xxhash64(key) AS key_hash")
    routed = route(frame, layout, placement_labels(layout.n_channels))
    got = {r.key: r.channel for r in routed.collect()}
    expected = layout.lookup(np.array([hash_str(w) for w in words], dtype=np.int64))
    assert [got[w] for w in words] == expected.tolist()

    placed = (
        routed.repartition(layout.n_channels, "label").select("channel", F.spark_partition_id().alias("p")).distinct()
    )
    by_partition = {r.p: r.channel for r in placed.collect()}
    assert sorted(by_partition) == list(range(layout.n_channels))
    assert [by_partition[p] for p in range(layout.n_channels)] == list(layout.channels)


@pytest.mark.parametrize("change", ["scale_out", "scale_in"])
def test_the_task_order_places_new_channels_in_the_first_partitions(spark, change):
    """Spark starts a stage's tasks in partition order: a channel new in the layout (it rebuilds its
    state) is placed first, each channel still alone in its partition."""
    from pyspark.sql import functions as F

    from elasticity.layout import Layout
    from pipelines.elastic_stage import ordered_placement, placement_labels, route, task_order

    before = Layout.uniform(4)
    layout = before.scale_out(2) if change == "scale_out" else before.scale_in(1)
    order = task_order(layout, before.channels)
    frame = spark.createDataFrame([(f"w{i}",) for i in range(5000)], "key string").selectExpr(
        "*", "xxhash64(key) AS key_hash"
    )
    labels = ordered_placement(layout, placement_labels(layout.n_channels), order)
    placed = (
        route(frame, layout, labels)
        .repartition(layout.n_channels, "label")
        .select("channel", F.spark_partition_id().alias("p"))
        .distinct()
    )
    by_partition = {r.p: r.channel for r in placed.collect()}
    assert [by_partition[p] for p in range(layout.n_channels)] == order
    new = [c for c in layout.channels if c not in before.channels]
    assert order[: len(new)] == new


def _physical_plan(frame) -> str:
    return frame._sc._jvm.PythonSQLUtils.explainString(frame._jdf.queryExecution(), "simple")


def test_probe_rows_are_the_parsed_probes_read_from_the_cached_batch(spark, tmp_path):
    from elasticity.hashing import hash_str
    from pipelines.elastic_stage import probe_rows
    from pipelines.probes import PROBE_KAFKA_KEY

    probe = b'{"channel": 2, "routing_key": "w7", "sent_ms": 1700000000000, "epoch": 0}'
    rows = [(PROBE_KAFKA_KEY, probe), (b"user", b"w7 w8"), (PROBE_KAFKA_KEY, b'{"channel": 1}'), (None, b"w9")]
    spark.createDataFrame(rows, "key binary, value binary").write.parquet(str(tmp_path / "raw"))
    raw = spark.read.parquet(str(tmp_path / "raw")).persist()
    try:
        probes = probe_rows(raw)
        got = [(r.key, r.key_hash, r.probe_sent_ms) for r in probes.collect()]
        assert got == [("w7", hash_str("w7"), 1700000000000)]
        assert probe_rows(raw, key_column="word").columns == ["word", "key_hash", "probe_sent_ms"]
        # A plan that reads the files again would read the whole micro-batch from Kafka twice.
        plan = _physical_plan(probes)
        assert "InMemoryTableScan" in plan and "FileScan" not in plan.split("InMemoryRelation")[0], plan
    finally:
        raw.unpersist()
