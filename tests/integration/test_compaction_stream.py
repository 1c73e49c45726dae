"""A real stream compacting its results every few batches: the results folder count stays
bounded while the counts stay exact; the topics it creates carry their retention."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.streams import produce, wait_for_checkpoint

pytestmark = pytest.mark.integration

EVERY = 3


def test_compacting_stream_keeps_few_result_folders_and_exact_counts(spark, bootstrap, topic_factory, tmp_path):
    from pipelines import kafka_io
    from pipelines.jobs.wordcount import batch_oracle
    from pipelines.streams.compaction import batch_folders, compacted_upto
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec
    from tests.results import latest_word_counts

    topic = topic_factory("words", partitions=2)
    spec = StreamSpec(
        name="compacting",  # its own topics: another test may have created `wc.results` already
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(tmp_path / "compacting"),
        channels=2,
        trigger_seconds=0.2,
        max_offsets_per_trigger=40,
        compact_every_batches=EVERY,
        results_topic_retention_hours=12,
    )
    folders_seen = []
    compact_ms = []

    def observe(metrics) -> None:
        folders_seen.append(len(batch_folders(Path(spec.results_table))))
        if "compact" in metrics.phase_ms:
            compact_ms.append(metrics.phase_ms["compact"])

    stream = ElasticStream(spark, spec, on_metrics=observe)
    stream.start()
    try:
        for wave in range(3):
            produce(bootstrap, topic, [f"w{i % 13} w{(i * wave) % 7}" for i in range(150)])
            wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
    finally:
        stream.stop()

    expected = batch_oracle(kafka_io.read_batch(spark, bootstrap, topic))
    assert latest_word_counts(spark, spec.results_table) == expected
    batches = len(folders_seen)
    assert batches > 3 * EVERY and compact_ms, (batches, compact_ms)
    # One folder per bronze day (one day here) plus at most EVERY batches since the last compaction.
    assert max(folders_seen) <= EVERY + 2, folders_seen
    assert compacted_upto(spec.results_table) is not None
    assert topic_config(bootstrap, spec.results_topic)["retention.ms"] == str(12 * 3600 * 1000)
    assert topic_config(bootstrap, spec.dead_letter_topic)["retention.ms"] == str(168 * 3600 * 1000)


def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    from kafka.admin import ConfigResource, ConfigResourceType

    from pipelines.kafka_topics import admin_client

    with admin_client(bootstrap) as admin:
        response = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    return {key: data["value"] for key, data in response["topic"][topic].items()}
