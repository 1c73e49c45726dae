"""`esp ui` starts the real Dagster webserver + daemon, and the UI's GraphQL API sees esp's assets."""

from __future__ import annotations

import time

import pytest

from orchestration.names import TOPIC_INVENTORY_ASSET_KEY, stream_asset_key
from tests.e2e.dagster_ui import graphql, running_ui

pytestmark = pytest.mark.e2e

ASSETS_QUERY = "{ assetNodes { assetKey { path } } }"


def test_esp_ui_serves_the_code_location(tmp_path):
    with running_ui(tmp_path, {}) as port:
        deadline = time.monotonic() + 60
        keys: list = []
        while time.monotonic() < deadline and not keys:
            keys = [n["assetKey"]["path"] for n in graphql(port, ASSETS_QUERY).get("assetNodes") or []]
            time.sleep(1)
        assert list(TOPIC_INVENTORY_ASSET_KEY.path) in keys
        assert all(list(stream_asset_key(stream).path) in keys for stream in ("wordcount", "adclicks"))
        assert (tmp_path / "run" / "dagster" / "dagster.yaml").is_file()
