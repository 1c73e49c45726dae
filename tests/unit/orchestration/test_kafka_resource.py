"""The Dagster kafka resource takes its SASL login from the settings file at run time, keeps it out
of its own (UI-visible) config, and does not send it to a broker the launchpad names."""

from __future__ import annotations

import json

import pytest

from orchestration.resources import EspSettingsResource, KafkaResource

PASSWORD = "resource-pw-never-shown"


@pytest.fixture
def sasl_config(tmp_path):
    path = tmp_path / "esp.json"
    security = {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "esp"}
    path.write_text(json.dumps({"kafka": {"client_port": 19092, "security": {**security, "sasl_password": PASSWORD}}}))
    return str(path)


def test_connection_carries_the_settings_login_but_the_config_does_not(sasl_config):
    resource = KafkaResource(settings=EspSettingsResource(config_file=sasl_config))
    connection = resource.connection()
    assert connection.bootstrap_servers == "127.0.0.1:19092"
    assert connection.client_kwargs()["sasl_plain_password"] == PASSWORD
    assert PASSWORD not in json.dumps(resource.model_dump(mode="json"))


def test_another_broker_from_the_launchpad_is_refused_while_a_login_is_configured(sasl_config):
    settings = EspSettingsResource(config_file=sasl_config)
    with pytest.raises(ValueError, match="differs from the settings'"):
        KafkaResource(bootstrap_servers="evil.example:9092", settings=settings).connection()
    assert KafkaResource(bootstrap_servers="127.0.0.1:19092", settings=settings).connection().security.uses_sasl
    assert KafkaResource(bootstrap_servers="h:1").connection().bootstrap_servers == "h:1"  # PLAINTEXT: fine
