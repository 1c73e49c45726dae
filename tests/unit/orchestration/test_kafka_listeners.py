"""The broker's listener lines: PLAINTEXT by default; with a SASL listener the client port asks
for SASL PLAIN with the configured users, and inter-broker traffic gets a PLAINTEXT listener of its
own; every listener binds the configured host."""

from __future__ import annotations

from orchestration.stack.kafka_listeners import listener_ports, listener_properties
from pipelines.settings import KafkaSettings

SASL = {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "esp", "sasl_password": "pw1"}


def test_default_is_one_plaintext_client_listener():
    settings = KafkaSettings()
    properties = listener_properties(settings)
    assert properties["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert properties["inter_broker_listener"] == "PLAINTEXT"
    assert properties["sasl_properties"] == ""
    assert listener_ports(settings) == [9092, 9093]


def test_sasl_listener_requires_plain_logins_of_the_users():
    settings = KafkaSettings.model_validate(
        {"security": SASL, "sasl_listener": {"internal_port": 9194, "users": {"esp": "pw1", "ops": "pw2"}}}
    )
    properties = listener_properties(settings)
    assert properties["listeners"] == (
        "SASL_PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9194,CONTROLLER://127.0.0.1:9093"
    )
    assert properties["advertised_listeners"] == "SASL_PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9194"
    assert properties["inter_broker_listener"] == "INTERNAL"
    assert properties["protocol_map"] == "CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
    assert properties["sasl_properties"].splitlines() == [
        "sasl.enabled.mechanisms=PLAIN",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule"
        ' required user_esp="pw1" user_ops="pw2";',
    ]
    assert listener_ports(settings) == [9092, 9093, 9194]
