"""Reading the word-count stream's results back in tests: the latest count of every word."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from pipelines.streams.results import latest_rows


def latest_word_counts(spark: SparkSession, results_table: str) -> dict[str, int]:
    """word -> its newest count; empty when the stream has written no batch yet."""
    if not Path(results_table).exists() or not any(Path(results_table).glob("batch_id=*")):
        return {}
    return {r.word: r["count"] for r in latest_rows(spark, results_table, ["word"]).collect()}


def wrong_word_counts(spark: SparkSession, bootstrap: str, topic: str, results_table: str) -> dict[str, tuple]:
    """word -> (streamed count, oracle count) for every word whose streamed count differs from the
    batch oracle of the whole topic."""
    from pipelines import kafka_io
    from pipelines.jobs.wordcount import batch_oracle

    streamed = latest_word_counts(spark, results_table)
    oracle = batch_oracle(kafka_io.read_batch(spark, bootstrap, topic))
    return {w: (streamed.get(w), n) for w, n in oracle.items() if streamed.get(w) != n}


def stored_rows(table: str) -> list[dict]:
    """Every row of a results-like table at a path or URI (an object store's too), read through the
    state layer's pyarrow: no Spark session with the s3a connector needed. Empty when absent."""
    import pyarrow.dataset as ds

    from elasticity.state import uris

    fs, path = uris.filesystem(table)
    if fs.get_file_info(path).type.name == "NotFound":
        return []
    return ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive").to_table().to_pylist()


def newest_by_key(rows: list[dict], keys: list[str]) -> dict[tuple, dict]:
    """key -> the row of the highest batch_id among `rows` with that key (the key's current value)."""
    newest: dict[tuple, dict] = {}
    for row in rows:
        key = tuple(row[k] for k in keys)
        if key not in newest or row["batch_id"] > newest[key]["batch_id"]:
            newest[key] = row
    return newest
