"""The path layer of a stream's files, per scheme: a local path, a relative path, `file://`, `s3://`
(and Spark's `s3a://`), and a refused scheme."""

from __future__ import annotations

import os

import pyarrow.fs as pafs
import pytest

from elasticity.state import Location, uris


def test_a_local_path_is_kept_and_joined_as_a_path(tmp_path):
    root = str(tmp_path / "wc")
    assert uris.canonical(root) == root
    assert uris.join(root, "tables", "results") == f"{root}/tables/results"
    assert uris.is_local(root) and uris.local_path(root) == root
    assert uris.spark_path(root) == root


def test_a_relative_path_is_made_absolute_once_at_the_edge(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = uris.canonical("run/streams/wc")
    assert root == os.path.join(str(tmp_path), "run", "streams", "wc")
    monkeypatch.chdir("/")
    assert uris.canonical(root) == root  # canonical twice is canonical once


def test_a_file_uri_is_the_local_folder_it_names(tmp_path):
    root = str(tmp_path / "wc")
    for spelling in (f"file://{root}", f"file://{root}/", f"file://localhost{root}", f"file:{root}"):
        assert uris.canonical(spelling) == root, spelling
        assert uris.is_local(spelling) and uris.local_path(spelling) == root
        fs, path = uris.filesystem(spelling)
        assert isinstance(fs, pafs.LocalFileSystem) and path == root


def test_a_file_uri_on_another_host_is_refused():
    with pytest.raises(ValueError, match="host 'elsewhere'"):
        uris.canonical("file://elsewhere/data/wc")


def test_an_s3_root_stays_a_uri_and_s3a_is_the_same_bucket():
    assert uris.canonical("s3://bucket/streams//wc/") == "s3://bucket/streams/wc"
    assert uris.canonical("s3a://bucket/streams/wc") == "s3://bucket/streams/wc"
    root = "s3://bucket/streams/wc"
    assert uris.join(root, "control") == "s3://bucket/streams/wc/control"
    assert not uris.is_local(root)
    assert uris.spark_path(uris.join(root, "checkpoint")) == "s3a://bucket/streams/wc/checkpoint"
    with pytest.raises(uris.RemoteRoot, match=r"table compaction needs a local folder.*s3://"):
        uris.local_path(root, "table compaction")


def test_an_s3_root_needs_a_bucket_and_no_query():
    with pytest.raises(ValueError, match="names no bucket"):
        uris.canonical("s3:///streams/wc")
    with pytest.raises(ValueError, match="AWS_ENDPOINT_URL"):
        uris.canonical("s3://bucket/wc?endpoint_override=127.0.0.1:9000")


def test_the_local_cache_of_an_s3_root_is_on_this_machine():
    cache = uris.local_cache("s3://bucket/streams/wc")
    assert os.path.isabs(cache) and cache.endswith(os.path.join("bucket", "streams", "wc"))


@pytest.mark.parametrize("root", ["hdfs://namenode/wc", "gs://bucket/wc", "HTTP://host/wc", "mock:/wc"])
def test_an_unsupported_scheme_is_refused_naming_it(root):
    scheme = root.split(":")[0].lower()
    for use in (uris.canonical, uris.join, Location.of):
        with pytest.raises(uris.UnsupportedScheme, match=f"scheme '{scheme}'") as raised:
            use(root)
        assert raised.value.scheme == scheme


def test_a_colon_in_a_folder_name_is_not_a_scheme(tmp_path):
    root = str(tmp_path / "run:1")
    assert uris.canonical(root) == root and uris.is_local(root)
    assert uris.canonical("run:1/wc") == os.path.abspath("run:1/wc")
