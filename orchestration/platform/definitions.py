"""Platform definitions: the Kafka topic inventory, observed so the UI shows the broker's state, and
the nightly deletion of old runs (`run_retention`)."""

from dagster import AssetExecutionContext, Definitions, MaterializeResult, MetadataValue, asset

from orchestration.names import PLATFORM_GROUP, TOPIC_INVENTORY_ASSET_KEY
from orchestration.platform.run_retention import run_retention_job, run_retention_schedule
from orchestration.resources import KafkaResource


@asset(
    key=TOPIC_INVENTORY_ASSET_KEY,
    group_name=PLATFORM_GROUP,
    description="Topics on the Kafka broker and their partition counts.",
)
def kafka_topic_inventory(context: AssetExecutionContext, kafka: KafkaResource) -> MaterializeResult:
    from pipelines.kafka_topics import topic_partition_counts

    connection = kafka.connection()
    counts = topic_partition_counts(connection)
    context.log.info("broker %s has %d topics", connection, len(counts))
    table = "\n".join(["| topic | partitions |", "|---|---|"] + [f"| {t} | {n} |" for t, n in sorted(counts.items())])
    return MaterializeResult(
        metadata={"topics": len(counts), "partitions": sum(counts.values()), "inventory": MetadataValue.md(table)}
    )


defs = Definitions(assets=[kafka_topic_inventory], jobs=[run_retention_job], schedules=[run_retention_schedule])
