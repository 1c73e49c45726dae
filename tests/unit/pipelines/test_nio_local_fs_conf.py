"""The Spark conf for esp's java.nio local file system: both of Hadoop's local file system APIs
name esp's classes, whose sources are in infra/jvm/local-fs, and its jar joins the other class
path entries (the s3a connector's) instead of replacing them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.settings import ObjectStoreAccess, SparkSettings
from pipelines.spark_session import (
    NIO_LOCAL_FS_CLASSES,
    MissingJarsError,
    local_fs_jars,
    merged_conf,
    nio_local_fs_conf,
    object_store_conf,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
JAVA_SOURCES = REPO_ROOT / "infra" / "jvm" / "local-fs" / "src" / "main" / "java"


def test_both_hadoop_apis_open_local_paths_with_esps_classes(tmp_path):
    jar = tmp_path / "esp-local-fs.jar"
    conf = nio_local_fs_conf([jar])
    assert conf["spark.hadoop.fs.file.impl"] == "dev.esp.hadoop.NioLocalFileSystem"
    assert conf["spark.hadoop.fs.AbstractFileSystem.file.impl"] == "dev.esp.hadoop.NioLocalFs"
    assert conf["spark.driver.extraClassPath"] == conf["spark.executor.extraClassPath"] == str(jar)


@pytest.mark.parametrize("class_name", sorted(NIO_LOCAL_FS_CLASSES.values()))
def test_each_named_class_has_its_source(class_name):
    assert (JAVA_SOURCES / (class_name.replace(".", "/") + ".java")).is_file()


def test_the_class_paths_are_joined_and_the_rest_overridden(tmp_path):
    local_fs = nio_local_fs_conf([tmp_path / "fs.jar"])
    store = object_store_conf(ObjectStoreAccess("http://x", None, True, "provider"), [tmp_path / "aws.jar"])
    merged = merged_conf(local_fs, store, {"spark.hadoop.fs.file.impl": "mine"})
    assert merged["spark.driver.extraClassPath"] == f"{tmp_path}/fs.jar:{tmp_path}/aws.jar"
    assert merged["spark.executor.extraClassPath"] == f"{tmp_path}/fs.jar:{tmp_path}/aws.jar"
    assert merged["spark.hadoop.fs.file.impl"] == "mine"
    assert merged["spark.hadoop.fs.s3a.endpoint"] == "http://x"


def test_a_missing_jar_names_the_command_that_builds_it(tmp_path):
    with pytest.raises(MissingJarsError, match="esp infra jars"):
        local_fs_jars(tmp_path)


def test_on_by_default():
    assert SparkSettings().nio_local_fs
