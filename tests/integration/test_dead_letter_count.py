"""A batch counts its rejected rows inside the job over its good rows, and still counts right
when Spark delivers no observation."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

ROWS = [(1, None), (2, "bad"), (3, None), (4, "worse"), (5, "odd")]


def _parsed(spark):
    return spark.createDataFrame(ROWS, "id long, reject_reason string").persist()


def test_the_job_over_the_good_rows_delivers_the_rejected_count(spark):
    from pipelines.dead_letters import CountedSplit, split_counting_rejected

    nothing = spark.createDataFrame([], "id long, reject_reason string")  # counting these would give 0
    observed = []
    # Spark 4.2 now and then completes an observation with an empty row; it must work most times.
    for _ in range(5):
        parsed = _parsed(spark)
        split = split_counting_rejected(parsed)
        assert sorted(r.id for r in split.good.collect()) == [1, 3]
        observed.append(CountedSplit(nothing, split.good, split.observation).rejected_count())
        parsed.unpersist()
    assert 3 in observed and set(observed) <= {0, 3}


def test_without_a_job_over_the_good_rows_the_rejected_rows_are_counted(spark):
    from pipelines.dead_letters import split_counting_rejected

    parsed = _parsed(spark)
    split = split_counting_rejected(parsed)
    assert split.rejected_count() == 3
    assert sorted(r.reject_reason for r in split.rejected().collect()) == ["bad", "odd", "worse"]
    parsed.unpersist()
