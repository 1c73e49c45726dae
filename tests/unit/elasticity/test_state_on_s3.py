"""The state layer on an object store: Location, a channel's history store and a migration, and the
layout registry, against a real S3-compatible server (moto's, on 127.0.0.1; fixture `s3_root`)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from elasticity.layout import Layout
from elasticity.migration import LayoutRegistry, Migrator
from elasticity.state import CorruptFile, HistoryBackend, Int64Codec, Location, RocksBackend

from .migration_helpers import assert_owned_exactly_once, populate


def test_a_location_on_s3_publishes_reads_lists_and_deletes(s3_root):
    folder = Location.of(s3_root).child("area")
    assert isinstance(folder.fs, pafs.S3FileSystem) and folder.names() == []
    folder.publish_bytes("a.bin", b"payload")
    folder.publish_ipc("t.arrow", pa.table({"x": [1, 2]}))
    folder.publish_bytes("doc.json", b'{"hand": "written"}', sealed=False)
    assert folder.read_bytes("a.bin") == b"payload"
    assert folder.read_ipc("t.arrow").column("x").to_pylist() == [1, 2]
    assert folder.read_document("doc.json") == b'{"hand": "written"}'
    assert folder.read_document("missing.json") is None
    assert folder.modified_s("a.bin") is not None and folder.modified_s("missing.json") is None
    assert folder.names() == ["a.bin", "doc.json", "t.arrow"]  # no temporary left by the publish
    with pytest.raises(CorruptFile, match="no checksum trailer"):
        folder.read_bytes("doc.json")
    folder.delete_file("a.bin")
    assert not folder.exists("a.bin")
    folder.delete_tree()
    assert folder.names() == []


def test_the_s3a_spelling_reaches_the_same_objects(s3_root):
    Location.of(s3_root).publish_bytes("x", b"1")
    assert Location.of("s3a" + s3_root.removeprefix("s3")).read_bytes("x") == b"1"


def test_channel_state_and_a_migration_on_s3_survive_a_restart(s3_root, tmp_path):
    elastic = f"{s3_root}/elastic"
    backend = HistoryBackend(Int64Codec(), durable=elastic)
    layout = Layout.uniform(3)
    expected = populate(backend, layout, 300)
    LayoutRegistry(Location.of(elastic)).initialize(layout)

    report = Migrator(elastic, backend).migrate(layout.scale_out(2))
    assert report.keys_moved > 0

    # A new process (fresh backend, RocksDB working sets rebuilt locally) finds the same state.
    restarted = RocksBackend(Int64Codec(), durable=elastic, local_dir=str(tmp_path / "local"))
    Migrator(elastic, restarted).recover()
    assert assert_owned_exactly_once(restarted, elastic, expected).n_channels == 5


def test_the_layout_registry_on_s3(s3_root):
    registry = LayoutRegistry(Location.of(f"{s3_root}/elastic"))
    first = registry.initialize(Layout.uniform(2))
    assert registry.initialize(Layout.uniform(7)) == first  # a second start keeps the committed one
    again = LayoutRegistry(Location.of(f"{s3_root}/elastic"))
    assert again.committed() == first and again.pending() is None
