"""A stream's driver builds its batch's DataFrames again in every micro-batch, and Spark analyses
each step as it is built: the stage's input, the dead-letter split and the stage's output take only
the steps a batch needs, and rows that are rarely there (rejected ones) are built only when they are."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def _steps(monkeypatch, build) -> int:
    """JVM DataFrames `build()` makes (one analysed step each)."""
    from pyspark.sql.classic.dataframe import DataFrame

    made: set[int] = set()  # by the JVM object's identity: PySpark may wrap one twice
    init = DataFrame.__init__

    def counting(self, jdf, *args, **kwargs):
        made.add(id(jdf))
        init(self, jdf, *args, **kwargs)

    monkeypatch.setattr(DataFrame, "__init__", counting)
    try:
        build()
    finally:
        monkeypatch.setattr(DataFrame, "__init__", init)
    return len(made)


def test_the_stage_input_takes_four_steps_its_probes_two(spark, monkeypatch) -> None:
    from pipelines.operator_stage import operator_input

    raw = spark.createDataFrame([(b"probe", b"{}")], "key binary, value binary")
    good = spark.createDataFrame([("w", 1)], "word string, n long")

    # The rows' hash (1), the probes (where, select: 2), their union (1).
    assert _steps(monkeypatch, lambda: operator_input(good, raw, "word")) == 4


def test_the_dead_letter_split_builds_the_rejected_rows_only_when_asked(spark, monkeypatch) -> None:
    from pipelines.dead_letters import split_counting_rejected

    parsed = spark.createDataFrame([(1, None), (2, "bad")], "id long, reject_reason string")

    assert _steps(monkeypatch, lambda: split_counting_rejected(parsed)) == 2  # observe, where
    split = split_counting_rejected(parsed)
    assert [r.id for r in split.rejected().collect()] == [2]


def test_the_word_count_splits_and_cuts_words_in_two_steps(spark, monkeypatch) -> None:
    from pipelines.jobs.wordcount import MAX_WORD_CHARS, words_of

    long_word = "x" * (MAX_WORD_CHARS + 50)
    lines = spark.createDataFrame([("a\tb  c",), (f"{long_word} y",), ("",)], "line string")

    assert _steps(monkeypatch, lambda: words_of(lines)) == 2
    words = sorted(r.word for r in words_of(lines).collect())
    assert words == sorted(["a", "b", "c", "x" * MAX_WORD_CHARS, "y"])


def test_the_last_stage_tags_its_output_rows_with_the_batch_in_the_same_step(spark, monkeypatch) -> None:
    from elasticity.operators.aggregates import IntSum, KeyedAggregate
    from pipelines.operator_stage import CHANNEL_COLUMN, REASON_COLUMN, REJECTED_COLUMN, output_rows, rejected_rows

    out = spark.createDataFrame(
        [("w", 3, 1, None, None), (None, None, 2, "late", '{"key": "v"}')],
        f"key string, value long, {CHANNEL_COLUMN} int, {REASON_COLUMN} string, {REJECTED_COLUMN} string",
    )
    operator = KeyedAggregate(IntSum(), value_column="n")

    assert _steps(monkeypatch, lambda: output_rows(out, operator, 7)) == 2  # where, select
    assert [tuple(r) for r in output_rows(out, operator, 7).collect()] == [("w", 3, 1, 7)]
    assert [tuple(r) for r in rejected_rows(out).collect()] == [(2, "late", '{"key": "v"}')]
