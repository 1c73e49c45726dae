"""A stream whose checkpoint was removed under existing state refuses to start, with the repair,
instead of taking new input for replays (black-box, through `esp stream run`)."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from pipelines.streams.names import checkpoint_path
from tests.integration.streams import config_for, kill_group, produce, start_stream, wait_for_checkpoint

pytestmark = pytest.mark.integration


def test_a_removed_checkpoint_is_refused(bootstrap, topic_factory, tmp_path):
    topic = topic_factory("checkpoint-removed", partitions=2)
    produce(bootstrap, topic, [f"a b c{i % 50}" for i in range(2_000)])
    config = config_for(tmp_path, bootstrap)
    root = tmp_path / "stream"
    log = tmp_path / "stream.log"
    args = ["--name", "ckpt-removed", "--job", "wordcount", "--topic", topic, "--root", str(root)]
    args += ["--channels", "2", "--trigger", "0.2", "--max-offsets", "500"]
    process = start_stream(config, log, *args)
    try:
        wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, process=process)
    finally:
        kill_group(process, signal.SIGTERM)

    shutil.rmtree(Path(checkpoint_path(root)))
    process = start_stream(config, log, *args)
    assert process.wait(timeout=180) != 0
    output = log.read_text()
    assert "knows no batch" in output and "Restore the checkpoint" in output, output[-3000:]
    assert not Path(checkpoint_path(root)).exists() or not any((Path(checkpoint_path(root)) / "commits").glob("[0-9]*"))
