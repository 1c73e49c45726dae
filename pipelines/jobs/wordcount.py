"""Word count: text lines → words → a running count per word.

The same tokenization serves the elastic job, the native-Spark baseline and the batch oracle,
so the three can only differ in how they keep state.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipelines import api
from pipelines.column_cache import once_per_jvm
from pipelines.dead_letters import REJECT, Reason, basic_value_checks, first_reason
from pipelines.probes import invalid_probe_check, without_valid_probes

MAX_WORD_CHARS = 200


def parse_lines(raw: DataFrame) -> DataFrame:
    """Kafka rows (valid probes excluded) with `line` and `reject_reason` (null when good)."""
    return without_valid_probes(raw).withColumns(_line_columns())


@once_per_jvm
def _line_columns() -> dict[str, Column]:
    """`line` (the value as text, trimmed) and its `reject_reason`: one dict every batch shares,
    read by `withColumns`, never changed."""
    value = F.col("value")
    # F.trim strips spaces only; a line of tabs and newlines is just as empty.
    line = F.regexp_replace(value.cast("string"), r"^\s+|\s+$", "")
    reason = first_reason(invalid_probe_check(), *basic_value_checks(value), (line == "", Reason.EMPTY_LINE))
    return {"line": line, REJECT: reason}


def words_of(lines: DataFrame) -> DataFrame:
    """One row per word of the good lines (split on whitespace; words cut to MAX_WORD_CHARS)."""
    # Two DataFrame steps: a stream's driver analyses each step again in every batch.
    word, not_empty = _word_columns()
    return lines.select(word).where(not_empty)


@once_per_jvm
def _word_columns() -> tuple[Column, Column]:
    """Each token of `line` cut to MAX_WORD_CHARS, as `word`; the word is not empty."""
    tokens = F.split(F.col("line"), r"\s+")
    words = F.transform(tokens, lambda token: F.substring(token, 1, MAX_WORD_CHARS))
    return F.explode(words).alias("word"), F.col("word") != ""


def word_deltas(lines: DataFrame, word_as: str = "word") -> DataFrame:
    """(`word_as`, n): how many times each word occurs in these lines (JVM pre-aggregation)."""
    return words_of(lines).groupBy(_word_as(word_as)).agg(_occurrences())


@once_per_jvm
def _word_as(name: str) -> Column:
    return F.col("word").alias(name)


@once_per_jvm
def _occurrences() -> Column:
    return F.count(F.lit(1)).alias("n")


def batch_oracle(raw: DataFrame) -> dict[str, int]:
    """The exact counts of everything in a Kafka batch read: the reference for tests."""
    good = parse_lines(raw).where(F.col(REJECT).isNull())
    return {r.word: r.n for r in word_deltas(good).collect()}


def native_counts(lines_stream: DataFrame) -> DataFrame:
    """The baseline: Spark's own stateful `groupBy().count()` (RocksDB state store)."""
    good = parse_lines(lines_stream).where(F.col(REJECT).isNull())
    return words_of(good).groupBy("word").count()


def _deltas(good: DataFrame, times: api.BatchTimes) -> api.Prepared:
    # Pre-aggregated in the JVM: the operator sees one (key = word, n) row per word of the batch.
    return api.Prepared(word_deltas(good, word_as="key"))


def _result_rows(out: DataFrame) -> DataFrame:
    return out.select(*_result_columns())


@once_per_jvm
def _result_columns() -> tuple[Column, ...]:
    return F.col("key").alias("word"), F.col("value").alias("count"), F.col("channel"), F.col("batch_id")


def _bronze(good: DataFrame) -> DataFrame:
    return good.select(
        "line", "topic", "partition", "offset", "timestamp", F.date_format("timestamp", "yyyy-MM-dd").alias("date")
    )


def wordcount_job() -> api.Job:
    """The word count on the public job API: words counted in the JVM per batch, each word's running
    total kept by the built-in `IntSum` aggregate on the elastic stage."""
    return api.Job(
        parse=parse_lines,
        operator=api.KeyedAggregate(api.IntSum(), value_column="n"),
        result_key_columns=("word",),
        prepare=_deltas,
        results=_result_rows,
        weight_column="n",
        archive=_bronze,
    )
