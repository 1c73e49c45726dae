"""Durable files carry a checksum verified on every read, and a publish on a local disk is fsynced.

A truncated changelog, a flipped byte in a layout, snapshot or journal entry must raise
`CorruptFile` naming the file: before checksums the changelog failed every later read with an
Arrow error naming nothing, and a damaged layout was silently taken for another layout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticity.layout import Layout
from elasticity.migration import LayoutRegistry, Migrator
from elasticity.migration.journal import Journal, Phase
from elasticity.state import CorruptFile, HistoryBackend, Int64Codec, Location, MemoryBackend, RocksBackend
from elasticity.state.files import encode_ipc
from elasticity.state.records import entries_table


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path: Path, by: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - by])


def _committed_batches(durable: str, local: str, batches: int) -> RocksBackend:
    executor = RocksBackend(Int64Codec(), durable, local)
    for batch in range(batches):
        with executor.open(0).begin(batch) as tx:
            tx.put(f"k{batch}", batch)
    return executor


def test_a_truncated_changelog_is_named_not_misread(tmp_path: Path) -> None:
    durable = str(tmp_path / "durable")
    _committed_batches(durable, str(tmp_path / "local"), 3).close()
    changelogs = sorted((tmp_path / "durable" / "channels" / "channel=0" / "changelog").iterdir())
    _truncate(changelogs[-1], 40)
    with pytest.raises(CorruptFile) as raised:
        HistoryBackend(Int64Codec(), durable).open(0).get("k2")
    assert changelogs[-1].name in str(raised.value)


def test_a_flipped_byte_in_a_layout_is_never_another_layout(tmp_path: Path) -> None:
    registry = LayoutRegistry(Location.of(str(tmp_path)))
    registry.initialize(Layout.uniform(4))
    (layout_file,) = [p for p in (tmp_path / "layout").iterdir() if p.name.startswith("epoch=")]
    # Owners swapped: still valid JSON and a valid layout, which was silently taken before.
    text = layout_file.read_text()
    assert '"owners": [0, 1, 2, 3' in text
    layout_file.write_text(text.replace('"owners": [0, 1, 2, 3', '"owners": [1, 0, 2, 3', 1))
    with pytest.raises(CorruptFile) as raised:
        registry.committed()
    assert layout_file.name in str(raised.value)


def test_a_damaged_pointer_snapshot_and_journal_entry_are_named(tmp_path: Path) -> None:
    location = Location.of(str(tmp_path))
    registry = LayoutRegistry(location)
    registry.initialize(Layout.uniform(2))
    _flip(tmp_path / "layout" / "current.json", 3)
    with pytest.raises(CorruptFile, match="current.json"):
        registry.committed()

    history = location.child("snapshot")
    history.publish_parquet("s.parquet", entries_table([1, 2], ["a", "b"], [b"1", b"2"]))
    _flip(tmp_path / "snapshot" / "s.parquet", 10)
    with pytest.raises(CorruptFile, match="s.parquet"):
        history.read_parquet("s.parquet")

    journal = Journal(location.child("journal"), lambda: 0.0)
    journal.record(Phase.PLANNED, request_id="r1")
    (entry,) = (tmp_path / "journal").iterdir()
    _flip(entry, 2)
    with pytest.raises(CorruptFile, match=entry.name):
        journal.entries()


def test_every_kind_round_trips(tmp_path: Path) -> None:
    location = Location.of(str(tmp_path))
    table = entries_table([3, 1], ["c", "a"], [b"x", None])
    location.publish_ipc("t.arrow", table)
    location.publish_parquet("t.parquet", table)
    location.publish_bytes("t.json", b'{"a": 1}')
    assert location.read_ipc("t.arrow").equals(table)
    assert location.read_parquet("t.parquet").equals(table)
    assert location.read_json("t.json") == {"a": 1}
    assert location.names() == ["t.arrow", "t.json", "t.parquet"]  # no temporaries left


def test_an_ipc_file_sized_in_advance_is_the_file_a_growing_stream_writes() -> None:
    table = entries_table(list(range(1000)), [f"k{i}" for i in range(1000)], [b"v" * (i % 7) for i in range(1000)])
    stream = pa.BufferOutputStream()
    with pa.ipc.new_file(stream, table.schema) as writer:
        writer.write_table(table)
    assert encode_ipc(table).to_pybytes() == stream.getvalue().to_pybytes()


def test_a_file_without_a_trailer_is_refused_unless_written_by_hand(tmp_path: Path) -> None:
    (tmp_path / "hand.json").write_bytes(b'{"a": 1}')
    location = Location.of(str(tmp_path))
    with pytest.raises(CorruptFile, match="no checksum trailer"):
        location.read_bytes("hand.json")
    assert location.read_bytes("hand.json", verify=False) == b'{"a": 1}'
    location.publish_bytes("sealed.json", b'{"a": 2}')
    _flip(tmp_path / "sealed.json", 2)
    with pytest.raises(CorruptFile):  # a sealed file is verified even where hand-written ones pass
        location.read_bytes("sealed.json", verify=False)


@pytest.fixture
def synced(monkeypatch) -> list[str]:
    """The paths fsynced from here on, in order."""
    paths: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return paths


def test_a_local_publish_fsyncs_the_file_and_its_directory(tmp_path: Path, synced: list[str]) -> None:
    Location.of(str(tmp_path)).publish_bytes("f.json", b"{}")
    assert len(synced) == 2
    assert Path(synced[0]).name.startswith(".tmp-")  # the file, before its rename
    assert synced[1] == str(tmp_path)  # the directory, after it


def test_directories_a_publish_creates_are_fsynced_into_their_parents(tmp_path: Path, synced: list[str]) -> None:
    Location.of(str(tmp_path)).child("a", "b").publish_bytes("f.json", b"{}")
    assert synced[:2] == [str(tmp_path), str(tmp_path / "a")]  # the new entries "a", then "b"
    assert Path(synced[2]).name.startswith(".tmp-") and synced[3] == str(tmp_path / "a" / "b")
    synced.clear()
    Location.of(str(tmp_path)).child("a", "b").publish_bytes("g.json", b"{}")
    assert len(synced) == 2  # existing directories are not synced again


def test_a_sound_checksum_over_an_unreadable_payload_is_still_named(tmp_path: Path) -> None:
    location = Location.of(str(tmp_path))
    location.publish_bytes("x.arrow", b"not arrow")
    location.publish_bytes("x.parquet", b"not parquet")
    location.publish_bytes("x.json", b"{not json")
    for read, name in (
        (location.read_ipc, "x.arrow"),
        (location.read_parquet, "x.parquet"),
        (location.read_json, "x.json"),
    ):
        with pytest.raises(CorruptFile) as raised:
            read(name)
        assert raised.value.path == str(tmp_path / name) and str(tmp_path / name) in str(raised.value)


def test_the_message_says_what_is_wrong_and_what_to_do(tmp_path: Path) -> None:
    location = Location.of(str(tmp_path))
    location.publish_bytes("f.json", b'{"epoch": 1}')
    _flip(tmp_path / "f.json", 0)
    with pytest.raises(CorruptFile) as raised:
        location.read_json("f.json")
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'f.json'} is corrupt: checksum mismatch (stored ")
    assert "damaged after esp wrote it" in message and "restore it from a copy" in message.lower()


@settings(max_examples=200, deadline=None)
@given(payload=st.binary(min_size=1, max_size=200), data=st.data())
def test_any_single_flip_or_truncation_is_detected(tmp_path_factory, payload: bytes, data) -> None:
    folder = tmp_path_factory.mktemp("files")
    location = Location.of(str(folder))
    location.publish_bytes("f", payload)
    path = folder / "f"
    size = path.stat().st_size
    if data.draw(st.booleans()):
        _flip(path, data.draw(st.integers(0, size - 1)))
    else:
        _truncate(path, data.draw(st.integers(1, size)))
    with pytest.raises(CorruptFile):
        location.read_bytes("f")


def _migrated(root: Path, new_layout, **options) -> tuple[LayoutRegistry, Layout, Layout]:
    """A stage on four channels migrated once to `new_layout(old)`; (registry, old, committed)."""
    backend = MemoryBackend(Int64Codec(), durable=str(root))
    old = Layout.uniform(4)
    registry = LayoutRegistry(Location.of(str(root)))
    registry.initialize(old)
    Migrator(str(root), backend).migrate(new_layout(old), **options)
    return registry, old, registry.committed()


def _rolled(old: Layout) -> Layout:
    """Every range to another existing channel: a rebalance, not a successor."""
    return Layout(old.epoch + 1, old.bounds, np.roll(old.owners, 1))


def test_a_migrated_layout_and_a_consented_rebalance_pass_the_lineage_check(tmp_path: Path) -> None:
    _, _, committed = _migrated(tmp_path / "a", lambda old: old.scale_out(1))
    assert LayoutRegistry(Location.of(str(tmp_path / "a"))).committed() == committed
    _, _, committed = _migrated(tmp_path / "b", _rolled, allow_rebalance=True)
    assert LayoutRegistry(Location.of(str(tmp_path / "b"))).committed() == committed


def test_a_pointer_edited_to_a_layout_no_migration_made_is_refused(tmp_path: Path) -> None:
    registry, old, _ = _migrated(tmp_path, lambda old: old.scale_out(1))
    # Published properly (a valid trailer, the epoch its name says), but never migrated to.
    forged = old.split(old.channels[0]).renumbered(7)
    registry.location.publish_bytes("epoch=0000000007.json", forged.to_json().encode())
    registry.location.publish_bytes("current.json", json.dumps({"epoch": 7, "previous": 1}).encode())
    with pytest.raises(CorruptFile, match="no migration from the previous epoch 1"):
        LayoutRegistry(Location.of(str(tmp_path))).committed()


def test_a_pointer_whose_previous_epoch_is_not_below_is_refused(tmp_path: Path) -> None:
    registry, _, committed = _migrated(tmp_path, lambda old: old.scale_out(1))
    registry.location.publish_bytes("current.json", json.dumps({"epoch": committed.epoch, "previous": 5}).encode())
    with pytest.raises(CorruptFile, match="epochs only grow"):
        LayoutRegistry(Location.of(str(tmp_path))).committed()


def test_a_committed_layout_replaced_by_a_non_successor_is_refused(tmp_path: Path) -> None:
    registry, old, committed = _migrated(tmp_path, lambda old: old.scale_out(1))
    # The same epoch and file name, a valid trailer, but ranges move between channels kept in both.
    reshuffled = Layout(committed.epoch, committed.bounds, np.roll(committed.owners, 1))
    registry.location.publish_bytes(f"epoch={committed.epoch:010d}.json", reshuffled.to_json().encode())
    with pytest.raises(CorruptFile, match=f"not a successor of epoch {old.epoch}"):
        LayoutRegistry(Location.of(str(tmp_path))).committed()
