"""The launchpad may only tune a run's Spark session: allowlisted keys and a local master; any
other key or master is refused with an error naming it, before a Spark session starts."""

from __future__ import annotations

import pytest
from dagster import asset, materialize

from orchestration.launchpad_spark import ALLOWED_SPARK_KEYS, RefusedSparkConf, allowed_master, allowed_spark_conf
from orchestration.resources import EspSparkResource

DANGEROUS = [
    "spark.pyspark.python",
    "spark.pyspark.driver.python",
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    "spark.jars",
    "spark.plugins",
    "spark.extraListeners",
    "spark.ui.killEnabled",
    "spark.driver.bindAddress",
    "spark.sql.adaptive.enabled",
]


@pytest.mark.parametrize("key", DANGEROUS)
def test_a_key_outside_the_allowlist_is_refused_by_name(key):
    with pytest.raises(RefusedSparkConf, match=f"'{key}' is not allowed from the launchpad"):
        allowed_spark_conf({"spark.sql.shuffle.partitions": 4, key: "x"})


def test_allowed_keys_pass_as_strings():
    assert allowed_spark_conf({"spark.sql.shuffle.partitions": 4, "spark.task.maxFailures": "2"}) == {
        "spark.sql.shuffle.partitions": "4",
        "spark.task.maxFailures": "2",
    }
    assert all(description for description in ALLOWED_SPARK_KEYS.values())


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4,3]"])
def test_local_masters_are_allowed(master):
    assert allowed_master(master, "local[*]") == master


@pytest.mark.parametrize("master", ["spark://elsewhere:7077", "yarn", "local-cluster[2,1,1024]", "local[0]"])
def test_other_masters_are_refused_unless_the_settings_name_them(master):
    with pytest.raises(RefusedSparkConf, match="is not allowed from the launchpad"):
        allowed_master(master, "local[*]")
    assert allowed_master(master, master) == master
    assert allowed_master(None, "spark://h:7077") == "spark://h:7077"


def test_the_resource_refuses_a_launchpad_key():
    with pytest.raises(ValueError, match="'spark.pyspark.python' is not allowed"):
        EspSparkResource(spark_config={"spark.pyspark.python": "/tmp/evil"})


@asset
def needs_spark(spark: EspSparkResource) -> None:
    raise AssertionError("the run must fail before its body runs")


@pytest.mark.parametrize(
    "config, named",
    [
        ({"spark_config": {"spark.driver.extraJavaOptions": "-javaagent:/tmp/x.jar"}}, "spark.driver.extraJavaOptions"),
        ({"master": "spark://elsewhere:7077"}, "spark://elsewhere:7077"),
    ],
)
def test_a_run_with_a_refused_launchpad_config_fails_naming_it(settings, config, named):
    # As the launchpad sends it: the resource's config in the run config. Refused before a
    # Spark session starts.
    result = materialize(
        [needs_spark],
        resources={"spark": EspSparkResource(settings=settings)},
        run_config={"resources": {"spark": {"config": config}}},
        raise_on_error=False,
    )
    assert not result.success
    errors = [str(e.event_specific_data) for e in result.all_events if e.is_failure]
    assert any(named in error and "not allowed from the launchpad" in error for error in errors), errors


def test_the_readme_lists_exactly_the_allowed_keys():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.split("**The launchpad.**", 1)[1].split("\n\n", 1)[0]
    listed = {word.strip("`,.") for word in section.split() if word.startswith("`spark.") and word.count(".") >= 2}
    documented_elsewhere = {"spark.pyspark.python", "spark.conf", "spark.master"}
    assert listed - documented_elsewhere == set(ALLOWED_SPARK_KEYS)
