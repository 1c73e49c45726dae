"""A stream whose root is a `file:///` URI, stopped and restarted from another working directory
under the plain-path spelling of the same folder, continues its checkpoint and its state: every
record counted exactly once (before the one path layer, the state went under the first working
directory as `file:/...` while Spark's checkpoint was elsewhere)."""

from __future__ import annotations

import signal

import pytest

from elasticity.migration import LayoutRegistry
from elasticity.state import Location
from pipelines.streams.names import checkpoint_path, elastic_path, results_table_path
from tests.integration import streams

pytestmark = pytest.mark.integration


def _lines(count: int, offset: int = 0) -> list[str]:
    return [" ".join(f"w{(i * 11 + j * 5) % 211}" for j in range(1 + i % 4)) for i in range(offset, offset + count)]


def test_a_file_uri_root_continues_after_a_restart_from_another_directory(spark, bootstrap, topic_factory, tmp_path):
    from pipelines import kafka_io
    from pipelines.jobs.wordcount import batch_oracle
    from tests.results import latest_word_counts

    topic = topic_factory("file-uri", partitions=2)
    folder = tmp_path / "streams" / "wc"
    first_cwd, second_cwd = tmp_path / "first-cwd", tmp_path / "second-cwd"
    first_cwd.mkdir()
    second_cwd.mkdir()
    config, log = streams.config_for(tmp_path, bootstrap), tmp_path / "stream.log"
    args = ["--name", "fileuri", "--topic", topic, "--channels", "2", "--trigger", "0.2", "--max-offsets", "500"]

    streams.produce(bootstrap, topic, _lines(2_000))
    process = streams.start_stream(config, log, *args, "--root", f"file://{folder}", cwd=first_cwd)
    try:
        checkpoint = checkpoint_path(f"file://{folder}")
        streams.wait_for_checkpoint(checkpoint, topic, bootstrap, timeout_s=300, process=process)
    finally:
        streams.kill_group(process, signal.SIGTERM)
    first_batches = streams.committed_batches(str(folder / "checkpoint"))
    layout = LayoutRegistry(Location.of(elastic_path(folder))).committed()
    assert first_batches > 0 and layout.n_channels == 2, log.read_text()[-3000:]
    assert list(first_cwd.iterdir()) == [], "the stream wrote under its working directory"

    streams.produce(bootstrap, topic, _lines(1_500, offset=2_000))
    process = streams.start_stream(config, log, *args, "--root", str(folder), cwd=second_cwd)
    try:
        streams.wait_for_checkpoint(checkpoint_path(folder), topic, bootstrap, timeout_s=300, process=process)
    finally:
        streams.kill_group(process, signal.SIGTERM)

    assert list(second_cwd.iterdir()) == []
    assert streams.committed_batches(str(folder / "checkpoint")) > first_batches  # the same checkpoint, continued
    assert LayoutRegistry(Location.of(elastic_path(folder))).committed() == layout  # and the same state
    streamed = latest_word_counts(spark, results_table_path(folder))
    assert streamed == batch_oracle(kafka_io.read_batch(spark, bootstrap, topic)), log.read_text()[-3000:]
