"""A benchmark run against a broker it was given deletes the topics it made there, and only those."""

from __future__ import annotations

import pytest

from benchmarks.rescale_command import bench_broker
from benchmarks.spark_runs import new_topic
from pipelines.kafka_topics import TopicSpec, delete_topics, ensure_topics, topic_partition_counts

pytestmark = pytest.mark.integration


def test_a_run_on_a_given_broker_leaves_none_of_its_topics(bootstrap, topic_factory, esp_settings):
    kept_bench = topic_factory("bench-from-before")
    kept_user = topic_factory("orders")
    with bench_broker(esp_settings, bootstrap) as servers:
        assert servers == bootstrap
        made = [new_topic(servers, "bench-esp-1000", 4), new_topic(servers, "bench-native-1000", 4)]
        ensure_topics(servers, [TopicSpec(name="bench-esp-1000.metrics", partitions=1)])
        users_meanwhile = topic_factory("users-meanwhile")
        assert set(made) <= set(topic_partition_counts(bootstrap))
    left = set(topic_partition_counts(bootstrap))
    assert not ({*made, "bench-esp-1000.metrics"} & left)
    assert {kept_bench, kept_user, users_meanwhile} <= left
    delete_topics(bootstrap, [kept_bench, kept_user, users_meanwhile])


def test_the_topics_are_deleted_when_the_run_fails(bootstrap, esp_settings):
    with pytest.raises(RuntimeError, match="the run failed"), bench_broker(esp_settings, bootstrap) as servers:
        made = new_topic(servers, "bench-failing", 2)
        raise RuntimeError("the run failed")
    assert made not in topic_partition_counts(bootstrap)
