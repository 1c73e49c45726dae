"""A stream SIGKILLed mid-batch, twice, and restarted loses and doubles nothing."""

from __future__ import annotations

import signal
import time

import pytest

from tests.integration.streams import committed_batches, config_for, kill_group, produce, start_stream, wait_for_checkpoint

pytestmark = pytest.mark.integration


def _lines(count: int, offset: int = 0) -> list[str]:
    return [" ".join(f"k{(i * 13 + j * 7) % 499}" for j in range(1 + i % 6)) for i in range(offset, offset + count)]


def _wait_for_batches(checkpoint: str, at_least: int, process, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while committed_batches(checkpoint) < at_least:
        assert process.poll() is None, "stream exited early"
        assert time.monotonic() < deadline, "stream made no progress"
        time.sleep(0.2)


def test_sigkill_mid_batch_twice_then_results_equal_the_oracle(spark, bootstrap, topic_factory, tmp_path):
    from pipelines import kafka_io
    from pipelines.jobs.wordcount import batch_oracle
    from pipelines.streams.metrics import read_recent
    from pipelines.streams.results import latest_word_counts

    topic = topic_factory("crash", partitions=4)
    produce(bootstrap, topic, _lines(12_000))
    config = config_for(tmp_path, bootstrap)
    root = tmp_path / "stream"
    checkpoint = str(root / "checkpoint")
    args = ["--name", "crash", "--topic", topic, "--root", str(root), "--channels", "3", "--trigger", "0.1",
            "--max-offsets", "800", "--observe-every", "1"]
    log = tmp_path / "stream.log"

    for round_ in range(2):
        process = start_stream(config, log, *args)
        _wait_for_batches(checkpoint, committed_batches(checkpoint) + 2, process)
        time.sleep(0.3 + 0.2 * round_)  # land inside a running batch, not at its boundary
        kill_group(process, signal.SIGKILL)
        produce(bootstrap, topic, _lines(1_000, offset=20_000 * (round_ + 1)))

    process = start_stream(config, log, *args)
    try:
        wait_for_checkpoint(checkpoint, topic, bootstrap, process=process)
        time.sleep(3)  # a few probe rounds
    finally:
        kill_group(process, signal.SIGTERM)

    expected = batch_oracle(kafka_io.read_batch(spark, bootstrap, topic))
    counts = latest_word_counts(spark, str(root / "tables" / "results"))
    assert counts == expected, log.read_text()[-3000:]
    assert not any(word.startswith("__probe") for word in counts)

    metrics = read_recent(bootstrap, "crash.metrics", limit=30)
    probed = {c.channel for m in metrics for c in m.per_channel if c.probe_latency_ms}
    assert probed == {0, 1, 2}
