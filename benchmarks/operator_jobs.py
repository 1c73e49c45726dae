"""The user job `esp bench operator` measures: "top-k pages per user", written only against
`pipelines.api` as any user's job module would be.

Input records are JSON `{"user_id": str, "page": str}`. Per user the state is a count per page;
each batch emits, for every user it touched, one row (user_id, top_pages) where `top_pages`
is the user's current k most viewed pages as `"page:count,..."`, most viewed first, ties broken
by page name. `top_pages_text` is that format; the Spark baselines of the benchmark call the
same function, so every system's rows are comparable byte for byte.

    esp stream run --job benchmarks.operator_jobs:topk_pages_job ...
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines import api

K = 3
"""How many pages a result row names."""
RECORD_SCHEMA = "user_id STRING, page STRING"
"""The Spark DDL schema of an input record."""
NOT_A_VIEW = "not a page view: JSON with a string user_id and a string page expected"
OUTPUT_SCHEMA = pa.schema([pa.field("user_id", pa.string()), pa.field("top_pages", pa.string())])
"""One result row per touched user and batch."""

PageCounts = dict[str, int]


def top_pages_text(counts: Mapping[str, int], k: int = K) -> str:
    """The k pages with the most views as "page:count,...": most views first, then by page name."""
    best = heapq.nsmallest(k, counts.items(), key=lambda item: (-item[1], item[0]))
    return ",".join(f"{page}:{n}" for page, n in best)


def parse_views(raw: DataFrame) -> DataFrame:
    """Kafka rows → the same rows with `user_id`, `page` and a `reject_reason` (null when both parsed)."""
    record = F.from_json(F.col("value").cast("string"), RECORD_SCHEMA)
    parsed = raw.withColumn("_record", record)
    parsed = parsed.withColumn("user_id", F.col("_record.user_id")).withColumn("page", F.col("_record.page"))
    reason = F.when(F.col("user_id").isNull() | F.col("page").isNull(), F.lit(NOT_A_VIEW))
    return parsed.drop("_record").withColumn(api.REJECT, reason)


class TopPages(api.KeyedOperator[PageCounts]):
    """Per user a count per page; each batch, every touched user's current top-k pages.

    Vectorized per channel: Arrow counts the batch's (user, page) pairs in one pass, then the
    touched users' states are read with one multi-get and written with one multi-put."""

    state_codec: api.JsonCodec[PageCounts] = api.JsonCodec()
    output_schema = OUTPUT_SCHEMA
    key_column = "user_id"
    # No timers and no TTL: the runner need not keep (nor, after a rescale, rebuild) a timer index.
    uses_timers = False

    def __init__(self, k: int = K) -> None:
        self.k = k

    def update(self, rows: pa.Table, state: api.StateView[PageCounts], ctx: api.Context) -> pa.Table:
        if rows.num_rows == 0:
            return self.empty_output()
        # One hash aggregation instead of a Python loop over rows; single-threaded so groups come
        # out in first-appearance order (a replay must emit the same rows in the same order).
        pairs = rows.group_by(["user_id", "page"], use_threads=False).aggregate(
            [(api.HASH_COLUMN, "min"), ([], "count_all")]
        )
        batch: dict[str, PageCounts] = {}
        hashes: dict[str, int] = {}
        for user, page, key_hash, n in zip(
            pairs["user_id"].to_pylist(),
            pairs["page"].to_pylist(),
            pairs[f"{api.HASH_COLUMN}_min"].to_pylist(),
            pairs["count_all"].to_pylist(),
        ):
            batch.setdefault(user, {})[page] = n
            hashes[user] = key_hash
        users = list(batch)
        user_hashes = [hashes[u] for u in users]
        updated: list[PageCounts] = []
        for user, counts in zip(users, state.get_many(users, user_hashes)):
            merged = counts or {}
            for page, n in batch[user].items():
                merged[page] = merged.get(page, 0) + n
            updated.append(merged)
        state.put_many(users, user_hashes, updated)
        return pa.table(
            [pa.array(users, pa.string()), pa.array([top_pages_text(c, self.k) for c in updated], pa.string())],
            schema=self.output_schema,
        )


def topk_pages_job() -> api.Job:
    """The benchmark's job: page views → each touched user's top-3 pages."""
    return api.Job(parse=parse_views, operator=TopPages(K), result_key_columns=("user_id",))
