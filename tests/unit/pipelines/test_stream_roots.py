"""A stream's root spelled as a `file://` URI, as a path, or relative: the same folder for Spark's
checkpoint and for the state layer, wherever the process runs (the defect: `Path("file:///a")` is
the relative path `file:/a`, so the state went under the working directory while Spark's checkpoint
went to `/a`, and a restart from another directory continued the checkpoint with empty state)."""

from __future__ import annotations

import json

import pytest

from elasticity.layout import Layout
from elasticity.migration import LayoutRegistry
from elasticity.state import Location, uris
from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleTarget
from pipelines.streams.files import StreamFiles
from pipelines.streams.metrics import checkpoint_offsets
from pipelines.streams.spec import StreamSpec
from pipelines.streams.table_retention import TableRetention


@pytest.fixture
def places(tmp_path, monkeypatch):
    """The stream's folder, and two working directories a driver may be started from."""
    first, second = tmp_path / "first-cwd", tmp_path / "second-cwd"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    return tmp_path / "streams" / "wc", first, second


def test_state_written_through_a_file_uri_is_found_through_the_path_from_another_directory(places, monkeypatch):
    folder, first, second = places
    by_uri = StreamSpec(root=f"file://{folder}")
    LayoutRegistry(Location.of(by_uri.elastic_root)).initialize(Layout.uniform(3))
    request = RescaleRequest(target=RescaleTarget(op="scale_to", channels=5))
    ControlChannel(by_uri.control_dir).request(request)

    monkeypatch.chdir(second)
    by_path = StreamSpec(root=str(folder))
    assert LayoutRegistry(Location.of(by_path.elastic_root)).committed().channels == (0, 1, 2)
    waiting = StreamFiles(by_path).pending_request()
    assert waiting is not None and waiting.request_id == request.request_id
    assert list(first.iterdir()) == []  # nothing under the first working directory


def test_spark_and_the_state_layer_see_one_folder_whatever_the_spelling(places):
    folder = places[0]
    spellings = [f"file://{folder}", f"file:{folder}", f"file://localhost{folder}/", str(folder)]
    specs = [StreamSpec(root=root) for root in spellings]
    assert {spec.root for spec in specs} == {str(folder)}
    assert {spec.checkpoint for spec in specs} == {f"{folder}/checkpoint"}
    assert {spec.elastic_root for spec in specs} == {f"{folder}/elastic"}
    assert {spec.control_dir for spec in specs} == {f"{folder}/control"}


def test_a_relative_root_is_made_absolute_where_the_spec_is_built(places, monkeypatch):
    _, first, second = places
    spec = StreamSpec(root="streams/wc")
    LayoutRegistry(Location.of(spec.elastic_root)).initialize(Layout.uniform(2))
    monkeypatch.chdir(second)
    assert spec.root == str(first / "streams" / "wc")
    assert LayoutRegistry(Location.of(spec.elastic_root)).committed().channels == (0, 1)


def test_the_checkpoint_is_read_through_a_file_uri(places, monkeypatch):
    folder, _, second = places
    checkpoint = folder / "checkpoint"
    for kind in ("offsets", "commits"):
        (checkpoint / kind).mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"words":{"0":7,"1":9}}\n')
    (checkpoint / "offsets" / "1").write_text('v1\n{"batchWatermarkMs":0}\n{"words":{"0":8,"1":9}}\n')
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    (checkpoint / "commits" / ".0.crc").write_text("")  # Hadoop's checksum files are not batches
    monkeypatch.chdir(second)
    files = StreamFiles(StreamSpec(root=f"file://{folder}"))
    assert (files.newest_planned_batch(), files.newest_committed_batch(), files.batch_in_flight()) == (1, 0, 1)
    assert files.heartbeat_age_s() is not None
    assert checkpoint_offsets(f"file://{checkpoint}", "words") == {0: 7, 1: 9}


def test_an_unsupported_scheme_is_refused_when_the_spec_is_built():
    with pytest.raises(ValueError, match="URI scheme 'hdfs'"):
        StreamSpec(root="hdfs://namenode/streams/wc")


def test_local_only_features_are_off_for_an_object_store_root(places):
    folder = places[0]
    local = TableRetention(spark=None, spec=StreamSpec(root=f"file://{folder}"), key_columns=("word",))  # type: ignore[arg-type]
    remote = TableRetention(spark=None, spec=StreamSpec(root="s3://bucket/wc"), key_columns=("word",))  # type: ignore[arg-type]
    assert local.local and not remote.local
    assert not remote.due(100) and local.due(100)
    # RocksDB's working sets stay on this machine for a root on the object store.
    assert uris.is_local(StreamSpec(root="s3://bucket/wc").local_state)


def test_a_control_document_written_through_a_file_uri_is_plain_json(places):
    from orchestration.elasticity.policy import POLICY_FILE, ElasticityPolicy, load_policy, write_policy

    folder = places[0]
    spec = StreamSpec(root=f"file://{folder}")
    write_policy(f"file://{folder}/control", ElasticityPolicy(slo_s=7.0))
    assert json.loads((folder / "control" / POLICY_FILE).read_text())["slo_s"] == 7.0
    assert load_policy(spec.control_dir, ElasticityPolicy()).slo_s == 7.0


def test_the_batch_tables_read_a_file_uri_and_refuse_an_object_store_by_name(places):
    from pipelines.batch import tables

    folder = places[0]
    (folder / "tables" / "bronze" / "date=2026-01-02" / "batch_id=3").mkdir(parents=True)
    assert tables.batch_days(f"file://{folder}/tables/bronze") == {3: {tables.parse_day("2026-01-02")}}
    with pytest.raises(uris.RemoteRoot, match=r"backfills.*s3://"):
        tables.bronze_days("s3://bucket/wc/tables/bronze")


def test_the_default_root_is_absolute_too(places):
    first = places[1]
    assert StreamSpec().root == str(first / ".esp" / "run" / "streams" / "wordcount")
