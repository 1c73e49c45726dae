"""Settings are typed: defaults, file loading, and errors that name the problem."""

from __future__ import annotations

import json

import pytest

from pipelines.settings import EspSettings, SettingsError


def test_defaults_are_local():
    settings = EspSettings()
    assert settings.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert settings.spark.master == "local[*]"


def test_file_overrides_nested_values(tmp_path):
    path = tmp_path / "esp.json"
    path.write_text(json.dumps({"kafka": {"client_port": 19092}, "spark": {"master": "spark://h:7077"}}))
    settings = EspSettings.load(path)
    assert settings.kafka.bootstrap_servers == "127.0.0.1:19092"
    assert settings.spark.master == "spark://h:7077"


def test_yaml_is_accepted(tmp_path):
    path = tmp_path / "esp.yaml"
    path.write_text("kafka:\n  heap: 1g\n")
    assert EspSettings.load(path).kafka.heap == "1g"


@pytest.mark.parametrize(
    "content, message",
    [
        ({"kafka": {"client_port": 70000}}, "client_port"),
        ({"kafka": {"no_such_option": 1}}, "no_such_option"),
    ],
)
def test_bad_values_are_named(tmp_path, content, message):
    path = tmp_path / "esp.json"
    path.write_text(json.dumps(content))
    with pytest.raises(SettingsError, match=message):
        EspSettings.load(path)


def test_missing_and_malformed_files_are_reported(tmp_path):
    with pytest.raises(SettingsError, match="does not exist"):
        EspSettings.load(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(SettingsError, match="not valid json"):
        EspSettings.load(broken)
