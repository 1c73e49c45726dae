"""Daily-partitioned batch assets: `<pipeline>_daily_counts`, one partition per UTC day,
recomputed by Spark from the stream's bronze archive (a user stream's by its job's `Recompute`).
Re-running a day replaces it."""

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    AssetSpec,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)
from pydantic import Field

from orchestration.backfills.targets import DAILY_PARTITIONS, BatchTarget, is_catalogued, spec_for, utc_today
from orchestration.names import (
    BACKFILLS_GROUP,
    PIPELINE_TAG,
    TABLES_GROUP,
    bronze_asset_key,
    daily_counts_asset_key,
    stream_asset_key,
)
from orchestration.resources import EspSettingsResource, EspSparkResource
from pipelines.api import JobError
from pipelines.batch.recompute import recompute_day
from pipelines.batch.tables import parse_day


class DailyRecomputeConfig(Config):
    """How one day is recomputed; the defaults recompute the catalogued stream's day."""

    stream_root: str | None = Field(
        None, description="The stream's folder (bronze in, daily table out); default: <run dir>/streams/<pipeline>."
    )


def bronze_asset(name: str) -> AssetSpec:
    """The bronze archive the stream writes (external: the stream run produces it)."""
    return AssetSpec(
        bronze_asset_key(name),
        deps=[stream_asset_key(name)] if is_catalogued(name) else [],
        group_name=TABLES_GROUP,
        description=f"Raw `{name}` input rows, archived by the stream per date and batch id (Parquet).",
        kinds={"parquet"},
    )


def make_daily_asset(target: BatchTarget) -> AssetsDefinition:
    @asset(
        key=daily_counts_asset_key(target.name),
        deps=[bronze_asset_key(target.name)],
        partitions_def=DAILY_PARTITIONS,
        group_name=BACKFILLS_GROUP,
        kinds={"spark", "parquet"},
        description=f"`{target.name}` results per UTC day, recomputed from the bronze archive (Spark batch).",
        op_tags={PIPELINE_TAG: target.name},
    )
    def daily_counts(
        context: AssetExecutionContext,
        config: DailyRecomputeConfig,
        esp_settings: EspSettingsResource,
        spark: EspSparkResource,
    ) -> MaterializeResult:
        day = parse_day(context.partition_key)
        if day > utc_today():
            raise Failure(f"partition {day} is in the future (today is {utc_today()} UTC)")
        try:
            pipeline = target.pipeline()
        except JobError as error:
            raise Failure(str(error)) from None
        spec = spec_for(esp_settings.load(), target.name, config.stream_root)
        result = recompute_day(spark.spark_session, pipeline, spec, day)
        if result.bronze_rows == 0:
            context.log.warning("no bronze rows for %s on %s: wrote an empty partition", target.name, day)
        return MaterializeResult(metadata=day_metadata(result, closed=day < utc_today()))

    return daily_counts


def day_metadata(result, closed: bool) -> dict:
    return {
        "day": result.day.isoformat(),
        "bronze_batches": result.bronze_batches,
        "bronze_rows": result.bronze_rows,
        "rows": result.rows_written,
        "total_count": result.total_count,
        "closed_day": closed,
        "table": MetadataValue.path(f"{result.table}/date={result.day.isoformat()}"),
    }
