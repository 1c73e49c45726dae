"""The word-count stream with its folder (checkpoint, channel state, layout registry, control
channel, tables) on an object store, and on a `file:///` URI: run by `esp stream run` in its own
process (a fresh JVM with the s3a jars), rescaled online 2 → 3, stopped, then restarted from
another working directory with more records; every word is counted exactly once (the oracle),
the checkpoint and the channel state continue (the 3-channel layout, the counts of before).

The object store is moto's S3 server (fixture `s3_endpoint`) and the root an `s3a://` URI: Spark
writes through Hadoop's s3a connector, the state layer through pyarrow. The first run finds the
store through the standard AWS variables of its environment, the restart through the settings
file's `object_store.endpoint_url` with `AWS_ENDPOINT_URL` unset (both sources, one store), and
the restart also finds no local RocksDB working set (deleted, as on another machine): the state
is rebuilt from the durable history on the store. Table compaction and bronze expiry need a
local file system and are off by themselves for an object-store root (the bronze archive is still
written); this test never reaches them on the `file:///` root either (`--compact-every 0`).

The `file:///` case is the defect of issue 21: `Path("file:///a")` is the relative `file:/a`, so
the state went under the working directory while Spark's checkpoint went to `/a`, and a restart
from elsewhere continued the checkpoint with empty state.

Marked `cluster`: run by `make test-cluster` (a minute or two of streams), not by `make test`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from elasticity.migration import LayoutRegistry
from elasticity.state import Location, uris
from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleTarget
from pipelines.streams.names import checkpoint_path, control_path, elastic_path, results_table_path
from pipelines.streams.spec import StreamSpec
from tests.integration import streams

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

STREAM_ARGS = ["--name", "storeroot", "--channels", "2", "--trigger", "0.3", "--max-offsets", "800"]
STREAM_ARGS += ["--compact-every", "0"]


def _lines(count: int, offset: int = 0) -> list[str]:
    # Words recur across the three rounds: a restart with empty state would undercount them.
    return [" ".join(f"w{(i * 11 + j * 5) % 173}" for j in range(1 + i % 4)) for i in range(offset, offset + count)]


def _stored_word_counts(results_table: str) -> dict[str, int]:
    """word -> its newest count, read from the results table through the state layer's pyarrow
    (this process's Spark has no s3a connector): the row of the highest batch per word."""
    import pyarrow.dataset as ds

    fs, path = uris.filesystem(results_table)
    table = ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive").to_table()
    newest: dict[str, tuple[int, int]] = {}
    for row in table.select(["word", "count", "batch_id"]).to_pylist():
        if row["word"] not in newest or row["batch_id"] > newest[row["word"]][0]:
            newest[row["word"]] = (row["batch_id"], row["count"])
    return {word: count for word, (_, count) in newest.items()}


def _run_until_caught_up(
    config: Path, log: Path, root: str, topic: str, bootstrap: str, cwd: Path, rescale=None, unset=()
):
    """`esp stream run` from `cwd`, its environment without the variables `unset`, until its
    checkpoint reached the topic's end (after a rescale to `rescale` channels asked online, if
    given), then a stop (SIGTERM to its process group)."""
    kept = {name: os.environ.pop(name) for name in unset if name in os.environ}
    try:
        process = streams.start_stream(config, log, *STREAM_ARGS, "--topic", topic, "--root", root, cwd=cwd)
    finally:
        os.environ.update(kept)
    try:
        streams.wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, timeout_s=300, process=process)
        if rescale is not None:
            channels, more = rescale
            request = RescaleRequest(target=RescaleTarget(op="scale_to", channels=channels), reason="test")
            control = ControlChannel(control_path(root))
            control.request(request)
            streams.produce(bootstrap, topic, more)  # a batch runs, and applies it, only when records arrive
            assert control.wait_for_result(request.request_id, timeout_s=180).committed, log.read_text()[-3000:]
            streams.wait_for_checkpoint(checkpoint_path(root), topic, bootstrap, timeout_s=300, process=process)
    finally:
        streams.kill_group(process, signal.SIGTERM)


def _settings_file(tmp_path: Path, bootstrap: str, name: str, **extra: object) -> Path:
    base = json.loads(streams.config_for(tmp_path, bootstrap).read_text())
    path = tmp_path / name
    path.write_text(json.dumps({**base, **extra}))
    return path


@pytest.fixture
def object_store_root(s3_root, s3a_jars):
    """`s3a://<bucket>/stream/wc`; the stream's local RocksDB working sets (in this machine's cache
    folder of the bucket) are removed afterwards."""
    root = "s3a" + s3_root.removeprefix("s3") + "/wc"
    yield root
    bucket = uris.canonical(root).split("/")[2]
    shutil.rmtree(uris.local_cache(f"s3://{bucket}"), ignore_errors=True)


@pytest.mark.parametrize("store", ["s3a", "file"])
def test_a_stream_on_a_uri_root_rescales_and_continues_from_another_directory(
    store, spark, bootstrap, topic_factory, tmp_path, request
):
    from pipelines import kafka_io
    from pipelines.jobs.wordcount import batch_oracle

    topic = topic_factory(f"{store}-root", partitions=2)
    first_cwd, second_cwd = tmp_path / "first-cwd", tmp_path / "second-cwd"
    first_cwd.mkdir()
    second_cwd.mkdir()
    log = tmp_path / "stream.log"
    first_config = second_config = streams.config_for(tmp_path, bootstrap)
    if store == "s3a":
        root = request.getfixturevalue("object_store_root")
        endpoint = request.getfixturevalue("s3_endpoint")
        settings = {"object_store": {"endpoint_url": endpoint}}
        second_config = _settings_file(tmp_path, bootstrap, "esp-endpoint.json", **settings)
    else:
        root = f"file://{tmp_path / 'streams' / 'wc'}"

    streams.produce(bootstrap, topic, _lines(1_200))
    _run_until_caught_up(first_config, log, root, topic, bootstrap, first_cwd, rescale=(3, _lines(600, 1_200)))
    first_batches = streams.committed_batches(checkpoint_path(root))
    layout = LayoutRegistry(Location.of(elastic_path(root))).committed()
    assert first_batches > 0 and layout.n_channels == 3, log.read_text()[-3000:]
    counted_before = _stored_word_counts(results_table_path(root))
    assert counted_before, "the first run wrote no results"

    streams.produce(bootstrap, topic, _lines(900, 1_800))
    if store == "s3a":
        shutil.rmtree(StreamSpec(root=root).local_state)  # no working set: as on another machine
    # On the object store, the restart finds the store through its settings file only.
    _run_until_caught_up(second_config, log, root, topic, bootstrap, second_cwd, unset=["AWS_ENDPOINT_URL"])

    assert list(first_cwd.iterdir()) == [] and list(second_cwd.iterdir()) == [], "a stream wrote under its cwd"
    assert streams.committed_batches(checkpoint_path(root)) > first_batches  # the same checkpoint, continued
    assert LayoutRegistry(Location.of(elastic_path(root))).committed() == layout  # and the same state
    counted = _stored_word_counts(results_table_path(root))
    assert counted == batch_oracle(kafka_io.read_batch(spark, bootstrap, topic)), log.read_text()[-3000:]
    # The restart's counts went on from the first run's, not from zero.
    assert all(counted[word] >= n for word, n in counted_before.items())
    assert any(counted[word] > n for word, n in counted_before.items())
