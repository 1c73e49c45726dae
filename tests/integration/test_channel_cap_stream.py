"""The per-channel records cap on the real stream (`esp stream run --max-records-per-channel`):
under a backlog each batch admits at most the cap times the channels it runs on, a rescale raises
the cap with the channels (the query is restarted after the rescaling batch, the restart reported),
and SIGKILLs around it lose and double nothing: the results equal the oracle."""

from __future__ import annotations

import signal

import pytest

from pipelines.streams.metrics import read_recent
from pipelines.streams.names import checkpoint_path, metrics_topic, results_table_path
from tests.integration.streams import (
    config_for,
    kill_and_restart,
    kill_group,
    produce,
    run_esp,
    start_stream,
    wait_for_checkpoint,
)
from tests.waiting import wait_for

# `make test-long`: about 2.5 minutes on a slow 2-core machine, and the per-channel cap is off by default.
pytestmark = [pytest.mark.integration, pytest.mark.long]

NAME = "channelcap"
PER_CHANNEL = 300
LINES_BEFORE_RESCALE = 5_000


def _lines(count: int, offset: int = 0) -> list[str]:
    return [" ".join(f"c{i}x{j}" for j in range(4)) for i in range(offset, offset + count)]


def _batches(bootstrap: str, process) -> dict:
    assert process.poll() is None, "the stream exited"
    return {m.batch_id: m for m in read_recent(bootstrap, metrics_topic(NAME), limit=1000, timeout_s=2)}


def _assert_the_rescaling_batch_had_the_new_cap(batches: dict, lines_produced: int) -> None:
    """The batch that applied the 1 -> 3 rescale admitted more than one channel's cap, when the
    request waited before the batch ahead of it ended (then that batch's end saw it and the query
    was swapped for three channels' cap) and the backlog still held more than one channel's cap."""
    rescaling = min((m for m in batches.values() if m.channels == 3), key=lambda m: m.batch_id)
    before = batches[rescaling.batch_id - 1]
    admitted_before = sum(m.admitted_records or 0 for m in batches.values() if m.batch_id < rescaling.batch_id)
    requested_at = (rescaling.rescale or {}).get("requested_at")
    if requested_at is None or requested_at >= before.wall_time or lines_produced - admitted_before <= PER_CHANNEL:
        return  # the request came after that batch's end, or the backlog was gone: nothing to tell
    assert (rescaling.admitted_records or 0) > PER_CHANNEL, (
        f"batch {rescaling.batch_id} applied the rescale under one channel's cap: {rescaling.admitted_records}"
    )


def test_batches_admit_the_cap_per_channel_a_rescale_raises_it_and_kills_lose_nothing(
    spark, bootstrap, topic_factory, tmp_path
):
    from tests.results import wrong_word_counts

    topic = topic_factory("channelcap", partitions=4)
    config = config_for(tmp_path, bootstrap)
    root = tmp_path / "stream"
    log = tmp_path / "stream.log"
    args = ["--name", NAME, "--job", "wordcount", "--topic", topic, "--root", str(root), "--channels", "1"]
    args += ["--trigger", "0.2", "--service-ms", "0.3", "--max-records-per-channel", str(PER_CHANNEL)]

    produce(bootstrap, topic, _lines(LINES_BEFORE_RESCALE))
    process = start_stream(config, log, *args)
    try:
        wait_for("three batches", lambda: len(_batches(bootstrap, process)) >= 3, 300, poll_s=1)
        rescaled = run_esp(config, "stream", "rescale", "--root", str(root), "--channels", "3", "--timeout", "180")
        assert rescaled.returncode == 0, rescaled.stdout + rescaled.stderr
        produce(bootstrap, topic, _lines(3_000, offset=10_000))
        wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, timeout_s=300, process=process)
        batches = _batches(bootstrap, process)

        for batch_id, metrics in batches.items():
            before = batches.get(batch_id - 1)
            # A batch is planned under the channels the batch before it left, or those of the rescale
            # request waiting when it was planned (the batch applies it).
            if before is not None and metrics.admitted_records is not None:
                most = PER_CHANNEL * max(before.channels, metrics.channels)
                assert metrics.admitted_records <= most, (batch_id, metrics, before)
        after = [m for m in batches.values() if m.channels == 3 and (m.admitted_records or 0) > PER_CHANNEL]
        assert after, f"no batch on 3 channels admitted more than one channel's cap: {sorted(batches)}"
        _assert_the_rescaling_batch_had_the_new_cap(batches, lines_produced=LINES_BEFORE_RESCALE)
        assert any(m.query_restart_ms for m in batches.values()), "no batch reported the query's restart"

        produce(bootstrap, topic, _lines(3_000, offset=20_000))
        # killed under a backlog, restarted with the cap of the committed channels
        process = kill_and_restart(process, config, log, *args)
        wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, timeout_s=300, process=process)
    finally:
        kill_group(process, signal.SIGTERM)

    wrong = wrong_word_counts(spark, bootstrap, topic, results_table_path(root))
    assert not wrong, f"{len(wrong)} words wrong, e.g. {list(wrong.items())[:5]}"
