"""The two-stage job `esp bench multistage` runs, written against `pipelines.api` as a user's would be.

Stage `main` counts words (the word count's parse and JVM pre-aggregation); every word a batch
updated then goes, as one row, to stage `buckets`, which counts per bucket of words (a hash of
the word, `BUCKETS` of them) how many word updates it saw. With a vocabulary much larger than a
batch, stage `main` emits about one row per input record (selectivity ≈ 1), so what stage
`buckets` will receive is predictable from what arrives on Kafka (As-Stream's Eq. 10-11).

The benchmark makes `buckets` the bottleneck with its own per-record cost
(`esp stream run --stage-service-ms buckets=<ms>`).

    esp stream run --job benchmarks.multistage_job:two_stage_job ...
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines import api
from pipelines.jobs.wordcount import wordcount_job

BUCKETS_STAGE = "buckets"
BUCKETS = 997
"""Buckets the second stage counts per (a prime: words spread evenly over them)."""


def word_updates_by_bucket(updated: DataFrame) -> DataFrame:
    """Stage `main`'s output (one row per word the batch updated) → one row per update, keyed by its bucket."""
    bucket = F.pmod(F.xxhash64("key"), F.lit(BUCKETS)).cast("string")
    return updated.select(bucket.alias("bucket"), F.lit(1).cast("long").alias("updates"))


def bucket_rows(totals: DataFrame) -> DataFrame:
    """Stage `buckets`' output → result rows: each bucket's word updates so far."""
    return totals.selectExpr("bucket", "value AS updates", "channel", "batch_id")


def two_stage_job() -> api.Job:
    """Word counts, then word updates per bucket (the benchmark's job; stage `buckets` starts on 1 channel)."""
    words = wordcount_job()
    return api.Job(
        parse=words.parse,
        operator=words.operator,
        prepare=words.prepare,
        weight_column=words.weight_column,
        stages=(
            api.Stage(
                name=BUCKETS_STAGE,
                operator=api.KeyedAggregate(api.IntSum(), value_column="updates", key_column="bucket"),
                rekey=word_updates_by_bucket,
                channels=1,
            ),
        ),
        result_key_columns=("bucket",),
        results=bucket_rows,
    )
