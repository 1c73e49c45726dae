"""Hostile records on the real broker and Spark: each once failed every replay of its batch (or
vanished); now the batch commits and the record is counted or dead-lettered with its reason."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from tests.integration.streams import dead_letters, produce_records, wait_for_checkpoint

pytestmark = pytest.mark.integration

WINDOW_S = 10


def _event(campaign: str, event_time: int, event_type: str = "view", serial: int = 0) -> bytes:
    fields = dict(event_id=f"e{serial}", user_id="u", page_id="p", ad_id="a", ad_type="banner")
    return json.dumps({**fields, "campaign_id": campaign, "event_type": event_type, "event_time": event_time}).encode()


def _spec(tmp_path, topic: str, bootstrap: str, job: str = "adclicks", **options):
    from pipelines.streams.spec import StreamSpec

    return StreamSpec(
        name=topic,  # the dead-letter topic is the stream's: one per test
        job=job,
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(tmp_path / job),
        channels=2,
        trigger_seconds=0.5,
        window_seconds=WINDOW_S,
        archive_input=False,
        **options,
    )


def _run(spark, spec, bootstrap: str, *waves: list[tuple[bytes | None, bytes | None]]) -> list[str]:
    """Produce each wave and let the stream commit it before the next; the records' positions."""
    from pipelines.streams.runner import ElasticStream

    stream = ElasticStream(spark, spec)
    query = stream.start()
    positions: list[str] = []
    try:
        for wave in waves:
            positions += produce_records(bootstrap, spec.input_topic, wave)
            wait_for_checkpoint(spec.checkpoint, spec.input_topic, bootstrap, query=query)
    finally:
        stream.stop()
    return positions


def _ad_counts(spark, spec) -> Counter:
    """(campaign, window start ms) → the newest count in the results table."""
    from pipelines.streams.results import latest_rows

    rows = latest_rows(spark, spec.results_table, ["campaign_id", "window_start"]).collect()
    return Counter({(r.campaign_id, int(r.window_start.timestamp() * 1000)): r["count"] for r in rows})


def test_an_event_time_beyond_sparks_range_is_dead_lettered(spark, bootstrap, topic_factory, tmp_path):
    from pipelines.dead_letters import Reason

    spec = _spec(tmp_path, topic_factory("ads-range", partitions=1), bootstrap)
    now = int(time.time() * 1000)
    good = [(None, _event("c", now, serial=i)) for i in range(20)]
    hostile = [(None, _event("c", t)) for t in (9_300_000_000_000_000, -9_300_000_000_000_000, 2**63 - 1)]
    positions = _run(spark, spec, bootstrap, good + hostile)

    letters = dead_letters(bootstrap, spec.dead_letter_topic)
    assert letters == dict.fromkeys(positions[20:], Reason.EVENT_TIME_OUT_OF_RANGE.value)
    assert sum(_ad_counts(spark, spec).values()) == 20


def test_an_event_far_in_the_future_is_dead_lettered_and_leaves_the_watermark(
    spark, bootstrap, topic_factory, tmp_path
):
    from pipelines.dead_letters import Reason

    spec = _spec(tmp_path, topic_factory("ads-future", partitions=1), bootstrap, watermark_seconds=30)
    now = int(time.time() * 1000)
    future = (None, _event("c", now + 10 * 86_400_000))
    first = [(None, _event("c", now, serial=i)) for i in range(10)] + [future]
    # Five seconds behind the first wave: on time unless the future event moved the watermark.
    second = [(None, _event("c", now - 5_000, serial=100 + i)) for i in range(10)]
    positions = _run(spark, spec, bootstrap, first, second)

    assert dead_letters(bootstrap, spec.dead_letter_topic) == {positions[10]: Reason.EVENT_TIME_AHEAD.value}
    window = lambda t: t // (WINDOW_S * 1000) * WINDOW_S * 1000  # noqa: E731
    expected = Counter({("c", window(now)): 10}) + Counter({("c", window(now - 5_000)): 10})
    assert _ad_counts(spark, spec) == expected  # nothing late: all 20 in the windows' counts


def test_campaign_ids_holding_the_key_separator_keep_their_own_counts(spark, bootstrap, topic_factory, tmp_path):
    spec = _spec(tmp_path, topic_factory("ads-sep", partitions=1), bootstrap)
    now = int(time.time() * 1000)
    start = now // (WINDOW_S * 1000) * WINDOW_S * 1000
    # "a|<start>" once landed in campaign "a" (a numeric tail); "b|x" failed the tail's cast.
    campaigns = {"a": 3, f"a|{start}": 2, "b|x": 4, "|": 1, "x||y": 2, f"{start}|": 1}
    records = [(None, _event(c, now, serial=i)) for c, n in campaigns.items() for i in range(n)]
    _run(spark, spec, bootstrap, records)

    assert _ad_counts(spark, spec) == {(c, start): n for c, n in campaigns.items()}
    assert dead_letters(bootstrap, spec.dead_letter_topic) == {}


def test_an_oversized_campaign_id_is_dead_lettered_not_a_failed_result_write(spark, bootstrap, topic_factory, tmp_path):
    from pipelines.dead_letters import Reason

    spec = _spec(tmp_path, topic_factory("ads-big", partitions=1), bootstrap)
    now = int(time.time() * 1000)
    # A 0.6 MB key plus a 0.6 MB value in its result record: over the producer's 1 MB request size.
    records = [(None, _event("c", now)), (None, _event("c" * 600_000, now)), (None, _event("c", now, "click", 2))]
    positions = _run(spark, spec, bootstrap, records)

    assert dead_letters(bootstrap, spec.dead_letter_topic) == {positions[1]: Reason.FIELD_TOO_LONG.value}
    assert sum(_ad_counts(spark, spec).values()) == 1


def test_records_keyed_as_probes_that_are_not_probes_are_dead_lettered(spark, bootstrap, topic_factory, tmp_path):
    from pipelines.dead_letters import Reason
    from pipelines.probes import PROBE_KAFKA_KEY, Probe
    from tests.results import latest_word_counts

    spec = _spec(tmp_path, topic_factory("words-probes", partitions=1), bootstrap, job="wordcount")
    valid = Probe(channel=0, routing_key="__probe_1", sent_ms=int(time.time() * 1000), epoch=0).to_json()
    invalid = [
        b"w1 w2",
        b"{not json",
        b'{"routing_key": "' + b"k" * 1_001 + b'", "sent_ms": 1}',
        b'{"routing_key": "k", "sent_ms": "abc"}',  # a failing cast in the probe rows once
        b'{"routing_key": "k"}',
        b"[1, 2]",
        None,
    ]
    records = [(None, b"w1 w1"), (PROBE_KAFKA_KEY, valid)] + [(PROBE_KAFKA_KEY, v) for v in invalid]
    positions = _run(spark, spec, bootstrap, records)

    assert dead_letters(bootstrap, spec.dead_letter_topic) == dict.fromkeys(positions[2:], Reason.INVALID_PROBE.value)
    assert latest_word_counts(spark, spec.results_table) == {"w1": 2}
