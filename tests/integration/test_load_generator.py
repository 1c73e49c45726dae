"""`esp load` against the real broker: paced runs and pre-loads read back from the topic.

Loads stay small (a few thousand records) because the machine is shared; nothing here asserts
speed or timing, only counts, content and that rates are reported.
"""

from __future__ import annotations

import json
import socket
import time
from collections import Counter

import pytest

from pipelines.kafka_topics import KafkaUnavailableError, UnknownTopicError
from pipelines.load import LoadSpec, expected_counts, preload, run_load
from pipelines.load.keys import vocabulary

pytestmark = pytest.mark.integration


def read_topic(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0) -> list[tuple[bytes | None, bytes]]:
    """Every (key, value) in the topic, polling until `expected` arrived or the timeout (then a few more polls)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, group_id=None
    )
    records: list[tuple[bytes | None, bytes]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records += [(r.key, r.value) for r in batch]
            if len(records) >= expected:
                for batch in consumer.poll(timeout_ms=1000).values():  # anything beyond would be a bug
                    records += [(r.key, r.value) for r in batch]
                break
    finally:
        consumer.close()
    return records


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_constant_load_arrives_complete_and_parses(bootstrap, topic_factory):
    topic = topic_factory("load-words")
    spec = LoadSpec(topic=topic, peak_rate=1000, duration_s=3, vocabulary=200, words_per_line=5, distribution="zipf")
    report = run_load(spec, bootstrap)

    assert report.target_records == 3000
    assert report.errors == 0 and not report.stopped_early
    assert report.records_sent + report.dropped == report.target_records
    assert report.records_sent > 0 and report.achieved_mean_rps > 0
    assert sum(report.per_second_sent) == report.records_sent
    assert len(report.per_second_target) == 3

    records = read_topic(bootstrap, topic, report.records_sent)
    assert len(records) == report.records_sent
    vocab = set(vocabulary(200))
    words = Counter()
    for key, value in records:
        line = value.decode().split(" ")
        assert key is None and len(line) == 5 and set(line) <= vocab
        words.update(line)
    assert dict(words) == report.counts  # the generator's counts are what the topic holds


def test_several_processes_produce_ad_events(bootstrap, topic_factory):
    topic = topic_factory("load-ads")
    spec = LoadSpec(
        topic=topic,
        kind="ads",
        key="natural",
        peak_rate=600,
        duration_s=3,
        processes=2,
        late_fraction=0.2,
        late_by_s=10,
    )
    report = run_load(spec, bootstrap)

    assert report.processes == 2
    assert report.errors == 0
    assert report.records_sent > 0 and report.achieved_mean_rps > 0
    records = read_topic(bootstrap, topic, report.records_sent)
    assert len(records) == report.records_sent
    events = [json.loads(value) for _, value in records]
    assert all(key.decode() == e["campaign_id"] for (key, _), e in zip(records, events))
    assert len({e["event_id"] for e in events}) == len(events)  # the two processes never repeat a record
    assert sum(e["event_type"] == "view" for e in events) == sum(report.counts.values())
    assert report.late_records == pytest.approx(0.2 * len(events), rel=0.5)


def test_preload_sends_exactly_n_records_with_the_expected_counts(bootstrap, topic_factory):
    topic = topic_factory("load-preload")
    spec = LoadSpec(topic=topic, vocabulary=500, words_per_line=4, distribution="zipf", processes=2, block_records=256)
    report = preload(spec, bootstrap, records=3000)

    assert report.records_sent == 3000 and report.errors == 0
    records = read_topic(bootstrap, topic, 3000)
    assert len(records) == 3000
    counted = Counter(w for _, value in records for w in value.decode().split(" "))
    assert dict(counted) == expected_counts(spec, 3000) == report.counts


def test_unknown_topic_is_a_clear_error(bootstrap):
    with pytest.raises(UnknownTopicError, match="no-such-topic"):
        run_load(LoadSpec(topic="no-such-topic", duration_s=1), bootstrap)


def test_broker_down_is_a_clear_error():
    with pytest.raises(KafkaUnavailableError, match="no Kafka broker"):
        run_load(LoadSpec(duration_s=1), f"127.0.0.1:{_closed_port()}")


def test_cli_run_prints_the_summary(bootstrap, topic_factory, tmp_path):
    from typer.testing import CliRunner

    from orchestration.cli.load import load_app

    topic = topic_factory("load-cli")
    out_json, out_png = tmp_path / "load.json", tmp_path / "load.png"
    args = ["run", "--topic", topic, "--peak", "500", "--duration", "2", "--bootstrap", bootstrap]
    result = CliRunner().invoke(load_app, [*args, "--json", str(out_json), "--plot", str(out_png)])
    assert result.exit_code == 0, result.output
    assert "achieved mean rate" in result.output
    summary = json.loads(out_json.read_text())
    assert summary["target_records"] == 1000 and summary["records_sent"] > 0
    assert out_png.stat().st_size > 0

    missing = CliRunner().invoke(
        load_app, ["run", "--topic", "absent-topic", "--duration", "1", "--bootstrap", bootstrap]
    )
    assert missing.exit_code == 1 and "unknown Kafka topic" in missing.output


@pytest.mark.parametrize("processes", [1, 2])
def test_sigterm_stops_flushes_and_still_prints_the_summary(bootstrap, topic_factory, tmp_path, processes):
    import signal
    import subprocess
    import sys

    topic = topic_factory("load-sigterm")
    out_json = tmp_path / "load.json"
    cli = "from orchestration.cli.load import load_app; load_app()"
    args = ["run", "--topic", topic, "--peak", "300", "--duration", "120", "--processes", str(processes)]
    proc = subprocess.Popen(
        [sys.executable, "-c", cli, *args, "--bootstrap", bootstrap, "--json", str(out_json)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        time.sleep(12)  # spawned producers start slowly on a busy machine; some must have sent by now
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()  # our own child, by its handle
    assert proc.returncode == 0, output
    assert "stopped early" in output
    summary = json.loads(out_json.read_text())
    assert summary["stopped_early"] and summary["records_sent"] > 0 and summary["errors"] == 0
    assert summary["target_records"] < 300 * 120
    assert len(read_topic(bootstrap, topic, summary["records_sent"])) == summary["records_sent"]  # flushed
