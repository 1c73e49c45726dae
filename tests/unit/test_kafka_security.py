"""Kafka client security settings: validation names the problem, the password never shows, and
the kafka-python and Spark renderings say the same thing."""

from __future__ import annotations

import json

import pytest

from pipelines.settings import (
    EspSettings,
    KafkaClientSecurity,
    KafkaConnection,
    KafkaSettings,
    SettingsError,
    kafka_connection,
)

PASSWORD = "pa55-w0rd-never-shown"
SASL = {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "esp", "sasl_password": PASSWORD}


def _load(tmp_path, kafka: dict) -> EspSettings:
    path = tmp_path / "esp.json"
    path.write_text(json.dumps({"kafka": kafka}))
    return EspSettings.load(path)


def test_default_is_plaintext_with_no_extra_options():
    kafka = EspSettings().kafka
    assert kafka.security.protocol == "PLAINTEXT" and kafka.sasl_listener is None
    assert kafka.connection.client_kwargs() == {"bootstrap_servers": "127.0.0.1:9092", "security_protocol": "PLAINTEXT"}
    assert kafka.connection.spark_options() == {
        "kafka.bootstrap.servers": "127.0.0.1:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }
    assert kafka_connection("h:1") == KafkaConnection("h:1")


@pytest.mark.parametrize(
    "security, message",
    [
        ({"protocol": "SASL_PLAINTEXT"}, "SASL_PLAINTEXT needs sasl_mechanism, sasl_username, sasl_password"),
        ({**SASL, "sasl_username": None}, "needs sasl_username"),
        ({"sasl_password": PASSWORD}, "sasl_password set but kafka.security.protocol PLAINTEXT does not use SASL"),
        ({**SASL, "ssl_cafile": "/ca.pem"}, "ssl_cafile/ssl_certfile set but kafka.security.protocol SASL_PLAINTEXT"),
        ({**SASL, "sasl_mechanism": "GSSAPI"}, "sasl_mechanism"),
        ({"protocol": "TLS"}, "protocol"),
        ({**SASL, "sasl_password": PASSWORD + '";evil'}, "sasl_password must not contain a double quote"),
        ({**SASL, "sasl_username": "a\\b"}, "sasl_username must not contain"),
        ({**SASL, "extra": 1}, "extra"),
    ],
)
def test_bad_security_is_named_without_echoing_the_password(tmp_path, security, message):
    with pytest.raises(SettingsError) as caught:
        _load(tmp_path, {"security": security})
    assert message in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_password_is_not_in_repr_or_str(tmp_path):
    settings = _load(tmp_path, {"security": SASL, "sasl_listener": {"users": {"esp": PASSWORD}}})
    for text in (repr(settings), str(settings), repr(settings.kafka.connection), str(settings.kafka.connection)):
        assert PASSWORD not in text
    assert str(settings.kafka.connection) == "127.0.0.1:9092"


def test_sasl_renders_for_kafka_python_and_spark():
    security = KafkaClientSecurity.model_validate({**SASL, "sasl_mechanism": "SCRAM-SHA-512"})
    assert security.client_kwargs() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "esp",
        "sasl_plain_password": PASSWORD,
    }
    assert security.spark_options() == {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="esp" password="{PASSWORD}";',
    }
    plain = KafkaClientSecurity.model_validate(SASL).spark_options()["kafka.sasl.jaas.config"]
    assert plain.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required ")


def test_tls_renders_pem_files_for_both_clients():
    security = KafkaClientSecurity(protocol="SSL", ssl_cafile="/etc/ca.pem", ssl_certfile="/etc/client.pem")
    assert security.client_kwargs() == {
        "security_protocol": "SSL",
        "ssl_cafile": "/etc/ca.pem",
        "ssl_certfile": "/etc/client.pem",
    }
    assert security.spark_options() == {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/ca.pem",
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.location": "/etc/client.pem",
    }


@pytest.mark.parametrize(
    "kafka, message",
    [
        ({"sasl_listener": {"users": {"esp": PASSWORD}}}, "set kafka.security.protocol SASL_PLAINTEXT"),
        ({"security": SASL, "sasl_listener": {"users": {}}}, "users"),
        ({"security": SASL, "sasl_listener": {"users": {"a b": PASSWORD}}}, "user name 'a b' may only hold"),
        ({"security": SASL, "sasl_listener": {"users": {"esp": PASSWORD + "\n"}}}, "password of kafka.sasl_listener"),
        ({"security": SASL, "sasl_listener": {"users": {"esp": PASSWORD + "é"}}}, "'esp' must be ASCII"),
    ],
)
def test_bad_sasl_listener_is_named(tmp_path, kafka, message):
    with pytest.raises(SettingsError) as caught:
        _load(tmp_path, kafka)
    assert message in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_yaml_example_of_the_readme_loads(tmp_path):
    path = tmp_path / "esp.yaml"
    path.write_text(
        "kafka:\n"
        "  security:\n"
        "    protocol: SASL_PLAINTEXT\n"
        "    sasl_mechanism: PLAIN\n"
        "    sasl_username: esp\n"
        f"    sasl_password: {PASSWORD}\n"
        "  sasl_listener:\n"
        "    users:\n"
        f"      esp: {PASSWORD}\n"
    )
    kafka: KafkaSettings = EspSettings.load(path).kafka
    assert kafka.security.uses_sasl and kafka.sasl_listener is not None
    assert kafka.sasl_listener.internal_port == 9094


def test_file_data_keeps_the_passwords_a_child_process_needs(tmp_path):
    settings = _load(tmp_path, {"security": SASL, "sasl_listener": {"users": {"esp": PASSWORD}}})
    path = tmp_path / "child.json"
    path.write_text(json.dumps(settings.to_file_data()))
    assert EspSettings.load(path) == settings
