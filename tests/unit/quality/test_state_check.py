"""The post-rescale state check on a real RocksDB state migrated by the real Migrator: it passes
after a clean rescale, and fails, naming the key, when a key sits in the wrong channel or when a
key's count is lost."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elasticity.hashing import hash_str
from elasticity.layout import Layout
from elasticity.migration import Migrator
from elasticity.migration.registry import LayoutRegistry
from elasticity.state import Int64Codec, Location, RocksBackend
from pipelines.streams.spec import StreamSpec

WORDS = {f"w{i}": i + 1 for i in range(200)}


def write_results(spec: StreamSpec, batch_id: int, counts: dict[str, int], layout: Layout) -> None:
    """A results batch exactly as the stream writes it (a batch_id folder, Spark's _SUCCESS)."""
    folder = Path(spec.results_table) / f"batch_id={batch_id}"
    folder.mkdir(parents=True, exist_ok=True)
    words = sorted(counts)
    table = pa.table(
        {
            "word": pa.array(words, pa.string()),
            "count": pa.array([counts[w] for w in words], pa.int64()),
            "channel": pa.array([int(layout.owner(hash_str(w))) for w in words], pa.int32()),
            "batch_id": pa.array([batch_id] * len(words), pa.int64()),
        }
    )
    pq.write_table(table, folder / "part-00000.parquet")
    (folder / "_SUCCESS").write_text("")


def backend_of(spec: StreamSpec, tmp_path: Path) -> RocksBackend:
    return RocksBackend(Int64Codec(), durable=spec.elastic_root, local_dir=str(tmp_path / "local"))


@pytest.fixture
def rescaled(tmp_path):
    """Batch 0 counted 200 words over 3 channels; then a rescale to 4 channels."""
    spec = StreamSpec(name="wordcount", root=str(tmp_path / "wordcount"))
    registry = LayoutRegistry(Location.of(spec.elastic_root))
    layout = registry.initialize(Layout.uniform(3))
    backend = backend_of(spec, tmp_path)
    for channel in layout.channels:
        with backend.open(channel).begin(0) as tx:
            for word, count in WORDS.items():
                if layout.owner(hash_str(word)) == channel:
                    tx.put(word, count)
    write_results(spec, 0, WORDS, layout)
    report = Migrator(Location.of(spec.elastic_root), backend).migrate(layout.scale_out(1))
    assert report.keys_moved > 0
    backend.close()
    return spec


def run_check(spec):
    from orchestration.quality.gx_validation import GreatExpectationsResource
    from orchestration.quality.state_check import check_state
    from pipelines.batch.pipelines import WORDCOUNT

    return check_state(WORDCOUNT, spec, GreatExpectationsResource())


def test_the_state_after_a_rescale_passes(rescaled):
    result = run_check(rescaled)

    assert result.passed, result.suite.failed
    assert result.census.layout.epoch == 1 and result.census.layout.n_channels == 4
    assert result.census.keys == len(WORDS) and result.census.total == sum(WORDS.values())
    assert result.baseline == {"keys": len(WORDS), "total": sum(WORDS.values()), "batch": 0}
    assert result.suite.statistics["success_percent"] == 100.0
    assert all(v["keys"] > 0 for v in result.census.per_channel.values())


def test_a_key_in_the_wrong_channel_fails_and_is_named(rescaled, tmp_path):
    layout = LayoutRegistry(Location.of(rescaled.elastic_root)).committed()
    owner = int(layout.owner(hash_str("w7")))
    wrong = next(c for c in layout.channels if c != owner)
    backend = backend_of(rescaled, tmp_path)
    # Batch 1 "moves" w7 to the wrong channel, count unchanged; the stream reports it as usual.
    with backend.open(owner).begin(1) as tx:
        tx.delete("w7")
    with backend.open(wrong).begin(1) as tx:
        tx.put("w7", WORDS["w7"])
    backend.close()
    write_results(rescaled, 1, {"w7": WORDS["w7"]}, layout)

    result = run_check(rescaled)

    assert not result.passed
    routing = next(e for e in result.suite.failed if e.column == "channel = routed_channel")
    assert routing.unexpected_count == 1
    assert routing.offending == [{"key": "w7", "channel": wrong, "routed_channel": owner}]
    assert result.census.total == sum(WORDS.values())  # the sum alone would not have caught it


def test_a_lost_count_fails_the_sum_and_names_the_key(rescaled, tmp_path):
    layout = LayoutRegistry(Location.of(rescaled.elastic_root)).committed()
    backend = backend_of(rescaled, tmp_path)
    with backend.open(int(layout.owner(hash_str("w42")))).begin(1) as tx:
        tx.put("w42", 1)  # a count silently reset, while the stream reported 44
    backend.close()
    write_results(rescaled, 1, {"w42": WORDS["w42"] + 1}, layout)

    result = run_check(rescaled)

    assert not result.passed
    assert [e.expectation for e in result.suite.failed] == ["expect_column_sum_to_be_between"]
    assert result.differing_keys == [
        {"key": "w42", "stored": 1, "expected": WORDS["w42"] + 1, "channels": [int(layout.owner(hash_str("w42")))]}
    ]


def test_a_batch_whose_results_are_not_written_yet_is_left_out(rescaled, tmp_path):
    """A stream mid-batch has committed state but not yet its results: the census steps back."""
    layout = LayoutRegistry(Location.of(rescaled.elastic_root)).committed()
    backend = backend_of(rescaled, tmp_path)
    with backend.open(int(layout.owner(hash_str("w1")))).begin(1) as tx:
        tx.put("w1", 1000)
    backend.close()

    result = run_check(rescaled)

    assert result.passed and result.census.batch == 0
