"""The Kafka topics one stream reads and writes, made ready before it starts: the input topic checked
(created first when the spec gives its partitions), the results, dead-letter and metrics topics
created with their retention when they do not exist."""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.kafka_topics import TopicSpec, ensure_topics, require_topics, retention_configs
from pipelines.streams.metrics import METRICS_TOPIC_CONFIGS
from pipelines.streams.names import FIRST_STAGE, stage_metrics_topic
from pipelines.streams.spec import StreamSpec


def prepare_topics(spec: StreamSpec, stages: Sequence[str] = (FIRST_STAGE,)) -> None:
    """Check the input topic (create it if the spec says how), create the output topics (a metrics
    topic per elastic stage)."""
    if spec.input_partitions is not None:
        topic = TopicSpec(name=spec.input_topic, partitions=spec.input_partitions)
        ensure_topics(spec.kafka, [topic])
    # Never created here otherwise: a misspelled input topic must stop the stream, not start it empty.
    require_topics(spec.kafka, [spec.input_topic])
    ensure_topics(
        spec.kafka,
        [
            TopicSpec(
                name=spec.results_topic,
                partitions=4,
                configs=retention_configs(spec.results_topic_retention_hours),
            ),
            TopicSpec(
                name=spec.dead_letter_topic,
                partitions=1,
                configs=retention_configs(spec.dead_letter_retention_hours),
            ),
            *(
                TopicSpec(name=stage_metrics_topic(spec.name, stage), partitions=1, configs=METRICS_TOPIC_CONFIGS)
                for stage in stages
            ),
        ],
    )
