"""The listener lines of the broker's server.properties: PLAINTEXT by default, SASL on request.

By default the client port is a PLAINTEXT listener that also carries inter-broker traffic. With
`kafka.sasl_listener`, the client port becomes SASL_PLAINTEXT (mechanism PLAIN, the configured
users) and inter-broker traffic moves to a PLAINTEXT listener of its own. Every listener binds
`kafka.host` (127.0.0.1 by default).
"""

from __future__ import annotations

from pipelines.settings import KafkaSettings

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def listener_properties(settings: KafkaSettings) -> dict[str, str]:
    """Substitutions for the listener placeholders of infra/kafka/server.properties.template."""
    host, controller = settings.host, f"CONTROLLER://{settings.host}:{settings.controller_port}"
    if settings.sasl_listener is None:
        client = f"PLAINTEXT://{host}:{settings.client_port}"
        return {
            "listeners": f"{client},{controller}",
            "advertised_listeners": client,
            "inter_broker_listener": "PLAINTEXT",
            "protocol_map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "sasl_properties": "",
        }
    client = f"SASL_PLAINTEXT://{host}:{settings.client_port}"
    internal = f"INTERNAL://{host}:{settings.sasl_listener.internal_port}"
    # The broker checks PLAIN logins against user_<name>="<password>" options of its login module
    # (names and passwords were validated to need no quoting).
    users = " ".join(
        f'user_{name}="{password.get_secret_value()}"' for name, password in settings.sasl_listener.users.items()
    )
    return {
        "listeners": f"{client},{internal},{controller}",
        "advertised_listeners": f"{client},{internal}",
        "inter_broker_listener": "INTERNAL",
        "protocol_map": "CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl_properties": "\n".join(
            [
                "sasl.enabled.mechanisms=PLAIN",
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN",
                f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_LOGIN_MODULE} required {users};",
            ]
        ),
    }


def listener_ports(settings: KafkaSettings) -> list[int]:
    """Every port the broker binds (each must be free before it starts)."""
    return settings.ports
