"""A stream SIGKILLed in the middle of a batch while a rescale request waits, then restarted,
loses and doubles nothing: black-box, through `esp stream run` and `esp stream rescale`.

The kill lands after at least one channel committed the in-flight batch and before Spark
committed it, so the restarted stream replays a batch that some channels already hold. A
migration applied before that replay would move keys with and without the batch's increments
(the defect this test was written for: 100 of 400 keys counted 3 times instead of 2 after a
split). The request must instead wait for the replay to complete under the layout it began with.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.streams.control import ControlChannel, RescaleResult
from pipelines.streams.names import checkpoint_path, control_path, elastic_path, results_table_path
from tests.integration.streams import config_for, kill_group, produce, start_stream, wait_for_checkpoint

pytestmark = pytest.mark.integration

KEYS = 400


def _lines(count: int, offset: int = 0) -> list[str]:
    return [" ".join(f"w{(i * 7 + j * 13) % KEYS}" for j in range(4)) for i in range(offset, offset + count)]


def _batch_in_flight(checkpoint: Path) -> int | None:
    def ids(folder: str) -> list[int]:
        path = checkpoint / folder
        return sorted(int(p.name) for p in path.glob("[0-9]*")) if path.is_dir() else []

    planned, committed = ids("offsets"), ids("commits")
    if planned and (not committed or planned[-1] > committed[-1]):
        return planned[-1]
    return None


def _channels_holding(elastic: Path, batch_id: int) -> list[int]:
    """Channels whose durable history already has a record of `batch_id` (committed there)."""
    from elasticity.state.records import Version

    holding = []
    for channel_dir in sorted((elastic / "channels").glob("channel=*")):
        versions = [Version.parse(p.name) for p in (channel_dir / "changelog").glob("b*.arrow")]
        if any(v.batch >= batch_id for v in versions):
            holding.append(int(channel_dir.name.split("=", 1)[1]))
    return holding


def _kill_after_a_channel_committed(process: subprocess.Popen, root: Path, timeout_s: float = 180) -> int:
    """SIGKILL the stream once a batch is begun, held by a channel, and not committed by Spark."""
    checkpoint, elastic = Path(checkpoint_path(root)), Path(elastic_path(root))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "the stream exited early"
        batch = _batch_in_flight(checkpoint)
        if batch is not None and batch > 0 and _channels_holding(elastic, batch):
            kill_group(process, signal.SIGKILL)
            assert _batch_in_flight(checkpoint) == batch, "the batch committed before the kill landed"
            return batch
        time.sleep(0.02)
    raise AssertionError("never caught a batch held by a channel and not committed")


def _request_while_stopped(config: Path, root: Path, *target: str) -> None:
    """`esp stream rescale` against the stopped stream: it times out, the request stays waiting."""
    esp = str(Path(sys.executable).parent / "esp")
    done = subprocess.run(
        [esp, "stream", "rescale", "--config", str(config), "--root", str(root), *target, "--timeout", "1"],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "did not answer" in done.stdout + done.stderr, done.stdout + done.stderr
    assert (Path(control_path(root)) / "rescale-request.json").exists()


def _wait_for_answer(root: Path, process: subprocess.Popen, timeout_s: float = 180) -> RescaleResult:
    control = Path(control_path(root))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "the stream exited"
        if not (control / "rescale-request.json").exists():
            results = sorted(control.glob("result-*.json"), key=lambda p: p.stat().st_mtime)
            assert results, "the request vanished without a result"
            return ControlChannel(str(control)).result(results[-1].name.removeprefix("result-").removesuffix(".json"))
        time.sleep(0.2)
    raise AssertionError("the stream never answered the waiting request")


def test_a_request_waiting_through_a_mid_batch_crash_waits_for_the_replay(spark, bootstrap, topic_factory, tmp_path):
    from pipelines import kafka_io
    from pipelines.jobs.wordcount import batch_oracle
    from tests.results import latest_word_counts

    topic = topic_factory("rescale-crash", partitions=4)
    produce(bootstrap, topic, _lines(1_500))
    config = config_for(tmp_path, bootstrap)
    root = tmp_path / "stream"
    log = tmp_path / "stream.log"
    # Slow channels (service time after the state commit) keep a batch held but uncommitted long
    # enough for the kill to land there; small batches make many such windows.
    args = ["--name", "rescale-crash", "--job", "wordcount", "--topic", topic, "--root", str(root)]
    args += ["--channels", "2", "--trigger", "0.2", "--max-offsets", "300", "--service-ms", "2", "--observe-every", "1"]

    # Each round's kill lands in the stream that has just answered the previous round's request
    # (three rounds, four stream starts): fresh input keeps its batches coming.
    answers = []
    process = start_stream(config, log, *args)
    try:
        for round_, target in enumerate((["--split", "0"], ["--channels", "4"], ["--merge", "1"])):
            _kill_after_a_channel_committed(process, root)
            _request_while_stopped(config, root, *target)
            produce(bootstrap, topic, _lines(1_500, offset=10_000 * (round_ + 1)))
            process = start_stream(config, log, *args)
            answers.append(_wait_for_answer(root, process))
            produce(bootstrap, topic, _lines(600, offset=10_000 * (round_ + 1) + 5_000))
        wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, timeout_s=300, process=process)
    finally:
        kill_group(process, signal.SIGTERM)

    assert [a.status for a in answers] == ["committed"] * 3, answers
    streamed = latest_word_counts(spark, results_table_path(root))
    oracle = batch_oracle(kafka_io.read_batch(spark, bootstrap, topic))
    wrong = {w: (streamed.get(w), n) for w, n in oracle.items() if streamed.get(w) != n}
    assert not wrong, f"{len(wrong)} of {len(oracle)} words wrong, e.g. {list(wrong.items())[:5]}"
