"""A user job (`pipelines.api.Job`, loaded by reference) on the real broker and Spark: its keyed
operator keeps exact state across online rescales 2 → 5 → 2, its results equal a plain oracle,
and records its parser rejects (or that lack a key) are dead-lettered with the reason."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from tests.integration.streams import dead_letters, produce, rescale_while_producing, wait_for_checkpoint

pytestmark = pytest.mark.integration

JOB = "tests.integration.jobs.spend:spend_job"


def _purchases(start: int, n: int) -> list[str]:
    return [json.dumps({"user": f"u{(i * 7) % 41}", "amount": i % 13}) for i in range(start, start + n)]


def test_user_job_rescaled_online_equals_the_oracle(spark, bootstrap, topic_factory, tmp_path):
    from pipelines.streams.results import latest_rows
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec
    from tests.integration.jobs.spend import NOT_A_PURCHASE

    topic = topic_factory("purchases", partitions=3)
    spec = StreamSpec(
        name="spend",
        job=JOB,
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(tmp_path / "spend"),
        channels=2,
        trigger_seconds=0.5,
        archive_input=False,
    )
    sent = _purchases(0, 600)
    produce(bootstrap, topic, sent)
    produce(bootstrap, topic, ["{not json", json.dumps({"user": None, "amount": 3})])
    stream = ElasticStream(spark, spec)
    stream.start()
    try:
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
        for round_, channels in enumerate((5, 2)):
            more = _purchases(600 * (round_ + 1), 600)
            rescale_while_producing(stream, channels, bootstrap, more)
            sent += more
            wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
    finally:
        stream.stop()

    expected: dict[str, float] = defaultdict(float)
    for record in map(json.loads, sent):
        expected[record["user"]] += record["amount"]
    results = {r.user: r.value for r in latest_rows(spark, spec.results_table, ["user"]).collect()}
    assert results == dict(expected)
    assert stream.last_metrics is not None and stream.last_metrics.channels == 2
    reasons = sorted(dead_letters(bootstrap, spec.dead_letter_topic).values())
    assert reasons == sorted([NOT_A_PURCHASE, "missing key: user is null"])
