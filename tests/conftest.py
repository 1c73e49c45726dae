"""Shared fixtures: settings pointing at the repo's folders, one Spark session per test run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


@pytest.fixture(scope="session")
def esp_settings():
    from pipelines.settings import EspSettings, SparkSettings

    spark = SparkSettings(master="local[2]", ui_enabled=False, shuffle_partitions=4, app_name="esp-tests")
    return EspSettings(project_root=REPO_ROOT, spark=spark)


@pytest.fixture(scope="session")
def spark(esp_settings):
    """One local Spark session for the whole run (the JVM start is the slow part)."""
    from pipelines.spark_session import build_spark_session

    session = build_spark_session(esp_settings)
    yield session
    session.stop()
