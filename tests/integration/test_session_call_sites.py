"""esp's Spark sessions do not record a Python call site per DataFrame call (five JVM round trips
and a stack walk each, hundreds per micro-batch), unless asked (`spark.dataframe_call_sites`)."""

from __future__ import annotations

import pytest

from pipelines.settings import SparkSettings
from pipelines.spark_session import spark_conf

pytestmark = pytest.mark.integration


def test_the_session_esp_builds_records_no_call_sites(spark) -> None:
    from pyspark.errors.utils import is_debugging_enabled

    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    assert not is_debugging_enabled()


def test_call_sites_are_one_setting_away() -> None:
    assert (
        spark_conf(SparkSettings(dataframe_call_sites=True), [])["spark.python.sql.dataFrameDebugging.enabled"]
        == "true"
    )
