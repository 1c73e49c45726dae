"""The cluster profile's object store as `esp infra up/status/down` run it, alone (no Kafka, no
Spark: seconds): moto's server on the configured port, the streams' bucket created and writable
through pyarrow with the settings' keys, refused twice, and stopped by its pid."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from orchestration.stack.errors import PortTakenError
from orchestration.stack.kafka_broker import ensure_port_free
from orchestration.stack.object_store import ObjectStoreAlreadyRunning, ObjectStoreServer
from pipelines.settings import EspSettings
from tests.conftest import free_port

pytestmark = pytest.mark.integration


def test_the_object_store_starts_with_its_bucket_and_stops_by_its_pid(tmp_path):
    port = free_port()
    settings = EspSettings.load(object_store={"server": {"enabled": True, "port": port, "bucket": "streams-here"}})
    server = ObjectStoreServer(settings.object_store.server, tmp_path / "run")
    try:
        state = server.up()
        assert state.running and state.answering and state.note == "bucket streams-here"
        with pytest.raises(ObjectStoreAlreadyRunning, match=f"pid {state.pid}"):
            server.up()
        access = settings.object_store.access({})
        env = access.environment()
        store = pafs.S3FileSystem(
            endpoint_override=access.endpoint_url,
            access_key=env["AWS_ACCESS_KEY_ID"],
            secret_key=env["AWS_SECRET_ACCESS_KEY"],
            region=access.region,
        )
        with store.open_output_stream("streams-here/wc/probe.txt") as out:
            out.write(b"kept")
        assert store.open_input_stream("streams-here/wc/probe.txt").read() == b"kept"
    finally:
        stopped = server.down()
    assert stopped and not server.status().running
    ensure_port_free("127.0.0.1", port)  # nothing listens any more
    assert server.down() is False


def test_a_taken_port_is_refused_naming_the_setting(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = EspSettings.load(object_store={"server": {"enabled": True, "port": port}})
        with pytest.raises(PortTakenError, match="object_store.server.port"):
            ObjectStoreServer(settings.object_store.server, tmp_path / "run").up()
