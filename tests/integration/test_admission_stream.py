"""Admission control on the real stream (`esp stream run --admission-high`): a backlog that would
make one long batch is capped after it, every later batch admits no more than the cap decided
before it (the batch Spark had planned under the old cap is planned again), the query restart is
reported; then SIGKILLs while capped, and the results still equal the oracle.

The durations themselves are the benchmark's (`esp bench admission`), not asserted here."""

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
    start_stream,
    wait_for_checkpoint,
)
from tests.waiting import wait_for

# `make test-long`: about 2.5 minutes on a slow 2-core machine, and admission control is off by default.
pytestmark = [pytest.mark.integration, pytest.mark.long]

NAME = "admission"


def _lines(count: int, offset: int = 0) -> list[str]:
    """Lines of four words never seen before: the stage's work grows with the lines admitted."""
    return [" ".join(f"u{i}x{j}" for j in range(4)) for i in range(offset, offset + count)]


def _batches(bootstrap: str, process, rule: str | None = None) -> dict:
    """The stream's batch metrics by batch id ({} if none has the `rule`, when one is asked for)."""
    assert process.poll() is None, "the stream exited"
    batches = {m.batch_id: m for m in read_recent(bootstrap, metrics_topic(NAME), limit=500, timeout_s=2)}
    return batches if rule is None or any(m.admission_rule == rule for m in batches.values()) else {}


def test_a_backlog_is_capped_the_cap_holds_and_kills_lose_nothing(spark, bootstrap, topic_factory, tmp_path):
    from tests.results import wrong_word_counts

    topic = topic_factory("admission", partitions=4)
    produce(bootstrap, topic, _lines(4_000))
    config = config_for(tmp_path, bootstrap)
    root = tmp_path / "stream"
    log = tmp_path / "stream.log"
    args = ["--name", NAME, "--job", "wordcount", "--topic", topic, "--root", str(root), "--channels", "2"]
    # A high watermark well above a batch's fixed cost on a busy 2-core machine (~1.5 s), so the
    # cap settles instead of sinking to its minimum.
    args += ["--trigger", "0.2", "--service-ms", "0.3", "--admission-high", "3", "--admission-low", "1"]

    process = start_stream(config, log, *args)
    try:
        # The first batch takes the whole backlog and caps the next ones; a second backlog is
        # then admitted a cap at a time.
        wait_for("a capped batch", lambda: _batches(bootstrap, process, rule="cap"), 300, poll_s=1)
        produce(bootstrap, topic, _lines(3_000, offset=50_000))
        wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, timeout_s=300, process=process)
        batches = _batches(bootstrap, process)
        under_a_cap = 0
        for batch_id, metrics in batches.items():
            before = batches.get(batch_id - 1)
            if before is not None and before.admission_cap is not None:
                assert metrics.admitted_records <= before.admission_cap, (batch_id, metrics, before)
                under_a_cap += 1
        assert under_a_cap >= 2, f"the second backlog ran under no cap: {sorted(batches.values(), key=str)}"
        assert any(m.query_restart_ms for m in batches.values()), "no batch reported the query's restart"

        produce(bootstrap, topic, _lines(3_000, offset=100_000))
        # killed while capped (a swap may be under way), restarted with the kept cap
        process = kill_and_restart(process, config, log, *args)
        wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, timeout_s=300, process=process)
    finally:
        kill_group(process, signal.SIGTERM)

    wrong = wrong_word_counts(spark, bootstrap, topic, results_table_path(root))
    assert not wrong, f"{len(wrong)} words wrong, e.g. {list(wrong.items())[:5]}"
