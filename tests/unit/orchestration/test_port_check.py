"""The broker's port check refuses a port someone listens on, not one a killed broker's
connections still hold in TIME_WAIT (a restart right after a crash must work)."""

from __future__ import annotations

import socket

import pytest

from orchestration.stack.kafka_broker import PortTakenError, ensure_port_free


def test_a_listening_port_is_taken():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with pytest.raises(PortTakenError, match="is taken"):
            ensure_port_free("127.0.0.1", listener.getsockname()[1])


def test_a_port_with_only_time_wait_connections_is_free():
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
    listener.close()
    client.close()
    ensure_port_free("127.0.0.1", port)
