"""`esp bench floor`'s figures from query progress: a chunk's batch is one that read input after
the warm-up, timed from its trigger's start to its commit; the table and the PNG render; the
throughput benchmark runs the partial queries only when profiling."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from benchmarks.floor import (
    SYSTEMS,
    FloorOptions,
    PartialWordCount,
    chunk_batches,
    chunk_lines,
    holds_state,
    summarize,
    systems_named,
)
from benchmarks.floor_command import ALL_SYSTEMS, floor_table, plot_floor
from benchmarks.throughput import ThroughputOptions, systems_of

T0 = 1_700_000_000.0


def _progress(batch_id: int, started_s: float, rows: int, add_batch_ms: float) -> dict:
    stamp = datetime.fromtimestamp(started_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {
        "batchId": batch_id,
        "timestamp": stamp,
        "numInputRows": rows,
        "durationMs": {"addBatch": add_batch_ms, "triggerExecution": add_batch_ms + 50},
    }


def test_a_chunk_batch_read_input_after_the_warm_up_and_has_a_commit() -> None:
    progresses = [
        _progress(0, T0, 200, 900),  # the warm-up chunk
        _progress(1, T0 + 2, 200, 300),
        _progress(2, T0 + 3, 0, 10),  # an idle trigger
        _progress(3, T0 + 4, 200, 250),
        _progress(4, T0 + 6, 200, 260),  # not committed yet
    ]
    commits = {0: T0 + 1, 1: T0 + 2.4, 2: T0 + 3.1, 3: T0 + 4.3}

    batches = chunk_batches(progresses, commits, after=0)

    assert [b["batch_id"] for b in batches] == [1, 3]
    assert [round(b["batch_s"], 3) for b in batches] == [0.4, 0.3]
    assert batches[0]["duration_ms"]["addBatch"] == 300


def test_the_summary_is_the_median_and_spread_of_batch_times_and_of_each_part() -> None:
    batches = [
        {"batch_s": s, "duration_ms": {"addBatch": a, "walCommit": 30}} for s, a in ((0.5, 400), (0.2, 100), (0.3, 200))
    ]

    summary = summarize(batches)

    assert (summary["median_s"], summary["min_s"], summary["max_s"]) == (0.3, 0.2, 0.5)
    assert summary["median_duration_ms"] == {"addBatch": 200, "walCommit": 30}
    assert summarize([])["median_s"] is None


def test_chunks_differ_by_salt_and_have_the_asked_shape() -> None:
    options = FloorOptions(chunk_lines=50, words_per_line=8, keys=1_000)

    first, second = chunk_lines(options, 0), chunk_lines(options, 1)

    assert len(first) == 50 and all(len(line.split()) == 8 for line in first)
    assert first != second
    assert {w for line in first for w in line.split()} <= {f"k{i}".encode() for i in range(1_000)}


def test_with_state_the_chunks_draw_from_the_held_words() -> None:
    options = FloorOptions(chunk_lines=500, words_per_line=8, keys=1_000, state_keys=1_000_000)

    words = {int(w[1:]) for line in chunk_lines(options, 3) for w in line.split()}

    # Spread over the state as the rescale benchmark's chunks are, not over the first 1,000 words.
    assert max(words) < 1_000_000 and len([w for w in words if w >= 1_000]) > len(words) // 2


def test_only_the_stateful_systems_hold_state() -> None:
    assert [s for s in SYSTEMS if holds_state(s)] == ["native", "esp"]


def test_systems_are_chosen_by_name_and_an_unknown_one_is_refused() -> None:
    assert systems_named(ALL_SYSTEMS) == SYSTEMS
    assert systems_named(" esp, native ") == ("esp", "native")
    with pytest.raises(ValueError, match="read, prepare, native, esp; got 'esp,spark'"):
        systems_named("esp,spark")
    with pytest.raises(ValueError, match="--systems"):
        systems_named(" , ")


def test_an_unknown_partial_query_is_refused_before_it_starts() -> None:
    partial = PartialWordCount(None, "count", "127.0.0.1:9092", "t", "/tmp/none", 0.5)  # type: ignore[arg-type]

    with pytest.raises(ValueError, match="read, prepare"):
        partial.start()


def test_the_throughput_benchmark_runs_the_partial_queries_only_when_profiling() -> None:
    assert systems_of(ThroughputOptions()) == ("esp", "native", "esp-full")
    assert systems_of(ThroughputOptions(profile=True, full_pipeline=False)) == ("esp", "native", "read", "prepare")


def test_the_table_and_the_plot_render(tmp_path) -> None:
    system = {
        "median_s": 0.3,
        "min_s": 0.2,
        "max_s": 0.5,
        "median_duration_ms": {"addBatch": 200, "triggerExecution": 260},
        "runs": [{"batch_s": 0.3}, {"batch_s": 0.2}],
    }
    results = {
        "options": {"chunk_lines": 200, "state_keys": 10_000_000},
        "systems": {"read": system, "native": {**system, "median_s": 0.6}},
        "ratios_to_native": {"read": 0.5, "native": 1.0},
    }

    table = floor_table(results)
    plot_floor(results, tmp_path / "floor.png")

    assert table.row_count == 2 and "10,000,000 keys of state" in str(table.title)
    assert (tmp_path / "floor.png").stat().st_size > 0


def test_the_throughput_table_shows_the_partial_queries_when_profiled() -> None:
    from benchmarks.throughput_command import throughput_table

    results = {
        "options": {"records": 1000, "partitions": 4},
        "ratio": 0.9,
        "elastic_records_per_s": 90.0,
        "native_records_per_s": 100.0,
        "elastic_busy_records_per_s": 95.0,
        "native_busy_records_per_s": 105.0,
        "busy_ratio": 0.9,
        "runs": [],
    }
    profiled = {**results, "read_records_per_s": 900.0, "read_ratio": 9.0, "prepare_records_per_s": 130.0}
    profiled["prepare_ratio"] = 1.3

    assert throughput_table(profiled).row_count == throughput_table(results).row_count + 2
