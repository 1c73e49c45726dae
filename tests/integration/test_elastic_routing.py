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
    from pipelines.elastic_stage import placement_labels, route, with_key_hash

    base = Layout.uniform(4)
    layout = {"uniform": base, "scale_out": base.scale_out(1), "scale_in": base.scale_in(1), "split": base.split(2)}[change]
    words = [f"w{i}" for i in range(5000)] + ["", "é", "日本語"]
    frame = with_key_hash(spark.createDataFrame([(w,) for w in words], "key string"))
    routed = route(frame, layout, placement_labels(layout.n_channels))
    got = {r.key: r.channel for r in routed.collect()}
    expected = layout.lookup(np.array([hash_str(w) for w in words], dtype=np.int64))
    assert [got[w] for w in words] == expected.tolist()

    placed = routed.repartition(layout.n_channels, "label").select("channel", F.spark_partition_id().alias("p")).distinct()
    by_partition = {r.p: r.channel for r in placed.collect()}
    assert sorted(by_partition) == list(range(layout.n_channels))
    assert [by_partition[p] for p in range(layout.n_channels)] == list(layout.channels)
