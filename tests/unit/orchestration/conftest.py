"""Fixtures shared by the orchestration unit tests."""

from __future__ import annotations

import json

import pytest

from orchestration.resources import EspSettingsResource


@pytest.fixture
def settings(tmp_path) -> EspSettingsResource:
    """esp settings whose run folder is under the test's temporary folder."""
    config = tmp_path / "esp.json"
    config.write_text(json.dumps({"run_dir_name": str(tmp_path / "run")}))
    return EspSettingsResource(config_file=str(config))
