"""A user job: JSON purchases {"user": str, "amount": int} → each user's total spend (built-in Sum)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines import api

RECORD_SCHEMA = "user STRING, amount BIGINT"
NOT_A_PURCHASE = "not a purchase: JSON with a string user and an integer amount expected"


def parse_purchases(raw: DataFrame) -> DataFrame:
    record = F.from_json(F.col("value").cast("string"), RECORD_SCHEMA)
    parsed = raw.withColumn("_record", record)
    parsed = parsed.withColumn("user", F.col("_record.user")).withColumn("amount", F.col("_record.amount"))
    reason = F.when(F.col("amount").isNull(), F.lit(NOT_A_PURCHASE))
    return parsed.drop("_record").withColumn(api.REJECT, reason)


def spend_job() -> api.Job:
    return api.Job(
        parse=parse_purchases,
        operator=api.KeyedAggregate(api.Sum(), value_column="amount", key_column="user"),
        result_key_columns=("user",),
    )
