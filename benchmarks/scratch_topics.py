"""A benchmark's topics on a broker it was given are deleted when the run ends.

Every run of a benchmark makes new topics: an input topic per system, size and repetition, and each
of its streams' results, metrics and dead-letter topics. On a private broker they go with the
broker's temporary folder. On a broker named by `--bootstrap` (the one of `esp infra up`) they used
to stay: after a few days of benchmarks, 366 of them held 6.7 GB of that broker's disk.

What a run deletes is what it created: the topics named `bench…` that were not on the broker when it
began. Topics that were there, and topics named otherwise, are never touched. Benchmarks measure
speed and are not run side by side; two of them against one broker at the same time would delete
each other's new topics at their ends.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from pipelines.kafka_topics import delete_topics, topic_partition_counts
from pipelines.settings import KafkaConnection

log = logging.getLogger(__name__)

BENCH_TOPIC_PREFIX = "bench"
"""Every benchmark's topics and stream names start with it (`bench-esp-…`, `bench_el_….metrics`)."""


def created_bench_topics(before: set[str], now: set[str]) -> list[str]:
    """The topics of `now` a benchmark made since `before`: new, and named `bench…`."""
    return sorted(name for name in now - before if name.startswith(BENCH_TOPIC_PREFIX))


@contextmanager
def topics_deleted_after(bootstrap: KafkaConnection | str) -> Iterator[None]:
    """Delete, when the block ends (also by an error), the `bench…` topics made on the broker
    during it. A broker that cannot be reached then is logged, not raised: the run's own outcome
    (its results, or its error) is what the caller needs."""
    before = set(topic_partition_counts(bootstrap))
    try:
        yield
    finally:
        try:
            created = created_bench_topics(before, set(topic_partition_counts(bootstrap)))
            delete_topics(bootstrap, created)
            log.info("deleted the benchmark's %d topics on %s", len(created), bootstrap)
        except Exception:
            log.warning("could not delete the benchmark's topics on %s", bootstrap, exc_info=True)
