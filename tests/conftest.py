"""Shared fixtures: settings, one Spark session and one real Kafka broker per test run (lazily)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from orchestration.stack.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[1]

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


@pytest.fixture(autouse=True)
def _no_stream_outlives_its_test():
    """A stream process a failed test left running is killed before the next test starts."""
    yield
    from tests.integration.streams import kill_leftover_streams

    kill_leftover_streams()


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


@pytest.fixture(scope="session")
def s3a_jars(esp_settings) -> None:
    """Hadoop's s3a connector, for streams whose folder is on the object store (resolved once,
    when missing: `make test` does not need it)."""
    from orchestration.stack.jvm import ensure_jars
    from orchestration.stack.project import jvm_layout

    ensure_jars(jvm_layout(esp_settings), object_store=True)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory, esp_settings):
    """A real KRaft broker started for this test run and stopped after it."""
    from orchestration.stack.jvm import ensure_jars
    from orchestration.stack.kafka_broker import KafkaBroker
    from orchestration.stack.project import jvm_layout
    from pipelines.settings import KafkaSettings

    ensure_jars(jvm_layout(esp_settings))
    settings = KafkaSettings(client_port=free_port(), controller_port=free_port(), heap="768m")
    broker = KafkaBroker(settings, tmp_path_factory.mktemp("kafka-run"), jvm_layout(esp_settings))
    broker.up()
    yield broker
    broker.down()


@pytest.fixture(scope="session")
def bootstrap(kafka_broker) -> str:
    return kafka_broker.settings.bootstrap_servers


@pytest.fixture
def topic_factory(bootstrap):
    """Creates uniquely named topics for one test."""
    from pipelines.kafka_topics import TopicSpec, ensure_topics

    def make(prefix: str, partitions: int = 4) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, [TopicSpec(name=name, partitions=partitions)])
        return name

    return make


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3-compatible server (moto's, from PyPI) on 127.0.0.1 for this test run: the state
    layer's object-store path, exercised without a cloud account."""
    import shutil
    import subprocess
    import sys
    import time
    import urllib.request

    server = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    if server is None:
        pytest.fail("moto_server is missing: `make install` installs the dev dependency moto[server]")
    port = free_port()
    process = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"moto_server did not answer on {endpoint}")
            time.sleep(0.2)
    yield endpoint
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def s3_root(s3_endpoint, monkeypatch) -> str:
    """`s3://<new bucket>/stream`, reachable through the AWS settings every pyarrow client reads."""
    import pyarrow.fs as pafs

    for name, value in {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "esp-tests",
        "AWS_SECRET_ACCESS_KEY": "esp-tests",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    bucket = f"esp-{uuid.uuid4().hex[:12]}"
    host = s3_endpoint.removeprefix("http://")
    pafs.S3FileSystem(endpoint_override=host, scheme="http", allow_bucket_creation=True).create_dir(bucket)
    return f"s3://{bucket}/stream"
