"""The cluster profile (`profile: cluster`, `--profile cluster`, $ESP_PROFILE): which pieces it turns
on, that the settings file still wins key by key, where the streams' folders go, and the local
object store's keys reaching only that store."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.stack.project import PROFILE_ENV, load_settings
from orchestration.streams.catalog import stream_root
from pipelines.settings import EspSettings

AWS_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch) -> None:
    """load_settings exports the store's variables: each test starts without them, and they are
    restored after it (monkeypatch keeps the originals)."""
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_the_cluster_profile_turns_on_every_cluster_piece():
    settings = EspSettings.load(profile="cluster", project_root="/p")
    assert settings.kafka.nodes == 3 and settings.kafka.replication_factor == 3
    assert settings.dagster_storage == "postgres"
    assert settings.spark_cluster.enabled and settings.spark.master == settings.spark_cluster.master_url
    assert settings.object_store.server.enabled
    assert settings.spark.executors.follow_channels and settings.spark.executors.max_executors == 2
    assert settings.streams_folder == "s3a://esp/streams"
    assert stream_root(settings, "wordcount") == "s3a://esp/streams/wordcount"


def test_the_settings_file_wins_key_by_key_over_the_profile():
    settings = EspSettings.load(
        profile="cluster",
        kafka={"nodes": 1, "client_port": 19092},
        spark={"master": "local[2]", "executors": {"max_executors": 4}},
        object_store={"server": {"bucket": "mine"}},
    )
    assert settings.kafka.nodes == 1 and settings.kafka.client_port == 19092
    assert settings.spark.master == "local[2]"  # given: the cluster's URL is only a default
    assert settings.spark.executors.max_executors == 4 and settings.spark.executors.follow_channels
    assert settings.spark_cluster.enabled and settings.dagster_storage == "postgres"
    assert settings.streams_folder == "s3a://mine/streams"


def test_the_local_profile_keeps_everything_on_this_machine():
    settings = EspSettings.load(project_root="/p")
    assert settings.profile == "local" and settings.kafka.nodes == 1 and settings.dagster_storage == "sqlite"
    assert not settings.spark_cluster.enabled and settings.spark.master == "local[*]"
    assert not settings.spark.executors.follow_channels
    assert settings.streams_folder == str(Path("/p") / ".esp/run" / "streams")
    assert stream_root(settings, "wc") == "/p/.esp/run/streams/wc"


def test_an_explicit_streams_root_wins_over_the_object_store():
    settings = EspSettings.load(profile="cluster", streams_root="file:///data/streams")
    assert stream_root(settings, "wc") == "file:///data/streams/wc"


def test_an_unknown_profile_is_refused():
    with pytest.raises(ValueError, match="profile"):
        EspSettings.load(profile="cloud")


def test_the_profile_comes_from_the_command_then_the_environment_then_the_file(tmp_path, monkeypatch):
    config = tmp_path / "esp.json"
    config.write_text('{"profile": "cluster"}')
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    assert load_settings(config).profile == "cluster"
    monkeypatch.setenv(PROFILE_ENV, "local")
    assert load_settings(config).profile == "local"
    assert load_settings(config, "cluster").profile == "cluster"
    assert load_settings(None, "cluster").kafka.nodes == 3


def test_the_local_servers_keys_reach_only_the_local_server():
    store = EspSettings.load(profile="cluster").object_store
    local = store.access({})
    assert local.endpoint_url == "http://127.0.0.1:9300"
    assert local.environment()["AWS_ACCESS_KEY_ID"] == "esp-local"
    elsewhere = store.model_copy(update={"endpoint_url": "https://s3.example.com"}).access({})
    assert elsewhere.endpoint_url == "https://s3.example.com"
    assert "AWS_ACCESS_KEY_ID" not in elsewhere.environment()  # a user's store: their own credentials
    off = EspSettings.load().object_store.access({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"})
    assert off.endpoint_url == "http://127.0.0.1:9000" and "AWS_ACCESS_KEY_ID" not in off.environment()


def test_loading_the_settings_points_this_process_at_the_profiles_store():
    """Sensors and `esp status` read stream folders on the store through pyarrow: without the
    export they asked AWS for the bucket `esp` (the demo on the profile failed so)."""
    import os

    load_settings(None, "cluster")
    assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9300"
    assert os.environ["AWS_ACCESS_KEY_ID"] == "esp-local" and os.environ["AWS_REGION"] == "us-east-1"


def test_loading_local_settings_leaves_the_aws_variables_alone():
    import os

    load_settings(None, "local")
    assert not any(name in os.environ for name in AWS_VARIABLES)
