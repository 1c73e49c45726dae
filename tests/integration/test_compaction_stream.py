"""A real stream compacting its results every few batches: the results folder count stays
bounded while the counts stay exact; the topics it creates carry their retention."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.streams import produce, wait_for_checkpoint

pytestmark = pytest.mark.integration

EVERY = 3
MAX_WAVES = 12


@dataclass(frozen=True)
class Seen:
    """The results table after one batch."""

    batch_id: int
    folders: int
    upto: int | None
    """The newest batch folded so far (None: not compacted yet)."""
    compact_ms: float | None
    """The time the batch spent publishing a staged compaction (None: none was ready)."""


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
    seen: list[Seen] = []

    def observe(metrics) -> None:
        table = Path(spec.results_table)
        published = metrics.phase_ms.get("compact")
        seen.append(Seen(metrics.batch_id, len(batch_folders(table)), compacted_upto(table), published))

    stream = ElasticStream(spark, spec, on_metrics=observe)
    stream.start()
    try:
        # Stagings run in the background, so how many publishes a fixed load sees depends on the
        # machine: waves go on (up to a bound) until two publishes were seen.
        for wave in range(MAX_WAVES):
            produce(bootstrap, topic, [f"w{i % 13} w{(i * wave) % 7}" for i in range(150)])
            wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
            if wave >= 2 and sum(1 for batch in seen if batch.compact_ms is not None) >= 2:
                break
    finally:
        stream.stop()

    expected = batch_oracle(kafka_io.read_batch(spark, bootstrap, topic))
    assert latest_word_counts(spark, spec.results_table) == expected
    publishes = [i for i, batch in enumerate(seen) if batch.compact_ms is not None]
    assert len(seen) > 3 * EVERY and len(publishes) >= 2, seen
    for i in publishes:
        # Each publish folds at least two batches into one folder: even with the publishing
        # batch's own new folder, the table has no more folders than after the batch before. (The
        # first may fold only two: batch 0, empty, has no bronze day and stays apart.)
        assert i > 0 and seen[i].folders <= seen[i - 1].folders, seen
    # The staging of a publish began at the batch after its `upto` (the batches committed then);
    # its lag is the batches that ran while it was staged in the background.
    lag = max(seen[i].batch_id - (seen[i].upto + 1) for i in publishes if seen[i].upto is not None)
    # One folder per bronze day (one day here, +1 if the run spans midnight) plus the batches since
    # the last folded one: its staging's lag, up to EVERY - 1 until the next staging begins, and
    # that staging's lag. A stream that never compacted would exceed it.
    assert max(batch.folders for batch in seen) <= 2 * lag + EVERY + 2, (lag, seen)
    assert compacted_upto(spec.results_table) is not None
    assert topic_config(bootstrap, spec.results_topic)["retention.ms"] == str(12 * 3600 * 1000)
    assert topic_config(bootstrap, spec.dead_letter_topic)["retention.ms"] == str(168 * 3600 * 1000)


def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    from kafka.admin import ConfigResource, ConfigResourceType

    from pipelines.kafka_topics import admin_client

    with admin_client(bootstrap) as admin:
        response = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    return {key: data["value"] for key, data in response["topic"][topic].items()}
