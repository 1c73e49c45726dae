"""Which topics a benchmark run counts as its own, to delete at its end."""

from __future__ import annotations

from benchmarks.scratch_topics import created_bench_topics


def test_only_new_topics_named_bench_are_the_runs():
    before = {"words", "bench-esp-1000-aaaa1111", "bench-kept.metrics"}
    now = before | {"bench-esp-1000-bbbb2222", "bench_el_abc123.metrics", "orders", "benchmarks-of-mine"}
    assert created_bench_topics(before, now) == [
        "bench-esp-1000-bbbb2222",
        "bench_el_abc123.metrics",
        "benchmarks-of-mine",
    ]


def test_a_topic_that_was_there_is_never_the_runs():
    topics = {"bench-esp-1000-aaaa1111", "bench-native-1000-cccc3333"}
    assert created_bench_topics(topics, topics) == []
