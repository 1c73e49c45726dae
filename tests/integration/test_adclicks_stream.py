"""Ad-click analytics on the real stack: windowed counts + late events equal the batch oracle,
and malformed events land in the dead-letter topic with their reason while the stream runs on."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from tests.integration.streams import produce, wait_for_checkpoint

pytestmark = pytest.mark.integration

WINDOW_S = 10
MALFORMED = {
    b"{not json": "invalid JSON",
    json.dumps({"event_id": "x"}).encode(): "missing field",
    json.dumps(
        {
            "event_id": "e",
            "user_id": "u",
            "page_id": "p",
            "ad_id": "a",
            "campaign_id": "c",
            "ad_type": "banner",
            "event_type": "view",
            "event_time": "yesterday",
        }
    ).encode(): "wrong type",
    b"   ": "empty",  # whitespace only: invalid JSON for this job
    b"\xff\xfe\x00bad": "not valid UTF-8",
    b"x" * 1_100_000: "larger than",
}


def _event(i: int, event_time_ms: int, event_type: str = "view") -> str:
    return json.dumps(
        {
            "event_id": f"e{i}",
            "user_id": f"u{i % 17}",
            "page_id": f"p{i % 5}",
            "ad_id": f"a{i % 30}",
            "campaign_id": f"c{i % 6}",
            "ad_type": "banner",
            "event_type": event_type,
            "event_time": event_time_ms,
        }
    )


def _read_dead_letters(bootstrap: str, topic: str) -> list[dict]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000)
    try:
        return [json.loads(r.value) for r in consumer]
    finally:
        consumer.close()


def test_windowed_counts_plus_late_equal_the_oracle_and_bad_events_are_dead_lettered(
    spark, bootstrap, topic_factory, tmp_path
):
    from pipelines import kafka_io
    from pipelines.jobs.adclicks import batch_oracle
    from pipelines.streams.results import latest_rows
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec

    topic = topic_factory("ads", partitions=2)
    now = int(time.time() * 1000)
    wave1 = [_event(i, now - 60_000 + i * 50, "view" if i % 3 else "click") for i in range(1200)]
    produce(bootstrap, topic, wave1 + list(MALFORMED))
    spec = StreamSpec(
        name="ads",
        job="adclicks",
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(tmp_path / "ads"),
        channels=2,
        trigger_seconds=0.5,
        window_seconds=WINDOW_S,
        watermark_seconds=5,
    )
    stream = ElasticStream(spark, spec)
    stream.start()
    try:
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap)
        late_wave = [_event(5000 + i, now - 600_000 + i * 100) for i in range(300)]
        on_time = [_event(9000 + i, now + i * 20) for i in range(300)]
        produce(bootstrap, topic, late_wave + on_time)
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap)
    finally:
        stream.stop()

    oracle = batch_oracle(kafka_io.read_batch(spark, bootstrap, topic), WINDOW_S)
    counted = {
        (r.campaign_id, int(r.window_start.timestamp() * 1000)): r["count"]
        for r in latest_rows(spark, spec.results_table, ["campaign_id", "window_start"]).collect()
    }
    late = Counter()
    for r in spark.read.parquet(spec.late_table).collect():
        late[(r.campaign_id, r.window_start_ms)] += r.n
    assert sum(late.values()) == len(late_wave)  # all late events are views, all behind the watermark
    merged = Counter(counted) + late
    assert dict(merged) == oracle

    reasons = [d["reason"] for d in _read_dead_letters(bootstrap, spec.dead_letter_topic)]
    assert len(reasons) == len(MALFORMED)
    for expected in MALFORMED.values():
        if expected != "empty":
            assert any(expected in r for r in reasons), (expected, reasons)
