"""Ranged snapshot reads: a donation decodes only the snapshot row groups its hash ranges meet,
and gets exactly the entries a whole read filtered to those ranges would."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticity.layout import Layout
from elasticity.migration.plan import MigrationPlan
from elasticity.state import HistoryBackend, Int64Codec
from elasticity.state.history import SNAPSHOT_ROW_GROUP_ROWS, FileHistory, MemoryHistory, row_groups_meeting
from elasticity.state.records import Version, entries_table, filter_ranges, sort_entries

SNAPSHOT = Version(3, 0)


def _entries(n: int, seed: int = 0) -> pa.Table:
    hashes = np.random.default_rng(seed).integers(-(2**63), 2**63 - 1, size=n, dtype=np.int64)
    return sort_entries(entries_table(hashes, [f"k{i}" for i in range(n)], [i.to_bytes(8, "little") for i in range(n)]))


def _ranges(bounds: list[int]) -> list[tuple[int, int]]:
    """Disjoint inclusive ranges from sorted, distinct cut points (pairs of them)."""
    cuts = sorted(set(bounds))
    return [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts) - 1, 2)]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[FileHistory, pa.Table]:
    entries = _entries(5 * SNAPSHOT_ROW_GROUP_ROWS + 123)
    history = FileHistory.at(str(tmp_path_factory.mktemp("history")))
    history.write_snapshot(SNAPSHOT, entries)
    return history, entries


_CUTS = st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8)


@settings(max_examples=60, deadline=None)
@given(_CUTS)
def test_a_ranged_read_is_the_whole_snapshot_filtered_to_the_ranges(written, cuts) -> None:
    history, entries = written
    ranges = _ranges(cuts)
    expected = filter_ranges(entries, ranges)
    assert history.read_snapshot(SNAPSHOT, ranges).equals(expected)
    memory = MemoryHistory()
    memory.write_snapshot(SNAPSHOT, entries)
    assert memory.read_snapshot(SNAPSHOT, ranges).equals(expected)


def test_a_snapshot_is_written_in_row_groups_a_reader_can_skip(written) -> None:
    history, entries = written
    metadata = _metadata(history)
    assert metadata.num_row_groups == 6
    # One narrow range in the middle of the hash order meets one group, not six.
    middle = entries["hash"][2 * SNAPSHOT_ROW_GROUP_ROWS + 10].as_py()
    assert row_groups_meeting(metadata, [(middle, middle + 1)]) == [2]
    assert row_groups_meeting(metadata, []) == []


def test_only_a_snapshots_values_are_dictionary_encoded(written) -> None:
    """Keys and hashes never repeat in a snapshot: a dictionary of them is work for nothing."""
    metadata = _metadata(written[0])
    names = metadata.schema.names
    for group in range(metadata.num_row_groups):
        dictionary = {
            names[i]: metadata.row_group(group).column(i).dictionary_page_offset is not None for i in range(len(names))
        }
        assert dictionary == {"hash": False, "key": False, "value": True}


def test_a_donation_through_the_history_decodes_only_the_groups_of_its_ranges(tmp_path: Path, monkeypatch) -> None:
    layout = Layout.uniform(4)
    backend = HistoryBackend(Int64Codec(), str(tmp_path))
    store = backend.open(layout.channels[0])
    entries = _entries(32 * SNAPSHOT_ROW_GROUP_ROWS, seed=1)
    owned = entries.filter(pa.array(layout.lookup(entries["hash"].to_numpy()) == layout.channels[0]))
    store.history.write_snapshot(SNAPSHOT, owned)
    store.history.write_changelog(SNAPSHOT, owned)  # the version the snapshot stands for
    store.sync()
    plan = MigrationPlan.between(layout, layout.scale_out(1))
    outgoing = sorted(r for ranges in plan.outgoing(layout.channels[0]).values() for r in ranges)
    decoded: list[int] = []
    read_row_groups = pq.ParquetFile.read_row_groups

    def counting(self, row_groups, *args, **kwargs):
        decoded.extend(row_groups)
        return read_row_groups(self, row_groups, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", counting)
    donated = store.entries(outgoing)
    assert donated.equals(filter_ranges(owned, outgoing))
    groups = _metadata(store.history).num_row_groups
    # A fifth of the channel moves to the new one, in a few hash ranges: about that share of
    # the file's groups is decoded, not all of them.
    assert groups >= 8
    assert 0 < len(decoded) <= groups / 2


def _metadata(history: FileHistory) -> pq.FileMetaData:
    folder = Path(history.base.file("snapshot"))
    (path,) = folder.glob("*.parquet")
    # The file ends in esp's checksum trailer; its Parquet footer sits before it.
    payload = path.read_bytes()
    return pq.ParquetFile(pa.BufferReader(payload[: payload.rfind(b"PAR1") + 4])).metadata
