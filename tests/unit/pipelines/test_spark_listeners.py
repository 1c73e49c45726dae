"""The Spark session's listeners default to loopback and its UI is read-only (no kill links)."""

from __future__ import annotations

from pipelines.settings import SparkSettings
from pipelines.spark_session import driver_environment, spark_conf


def test_the_driver_and_its_ui_bind_loopback_by_default():
    spark = SparkSettings()
    conf = spark_conf(spark, [])
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    # The web UI ignores Spark conf for its address: only SPARK_LOCAL_IP moves it off 0.0.0.0.
    assert driver_environment(spark)["SPARK_LOCAL_IP"] == "127.0.0.1"


def test_the_ui_has_no_kill_links():
    assert spark_conf(SparkSettings(), [])["spark.ui.killEnabled"] == "false"


def test_the_ui_address_is_a_setting():
    assert driver_environment(SparkSettings(ui_host="10.0.0.5"))["SPARK_LOCAL_IP"] == "10.0.0.5"
