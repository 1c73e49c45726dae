"""A session for a stream folder on an object store: the s3a connector resolved by infra/jvm at the
Hadoop version pyspark bundles, on the class path only for such a folder, and one endpoint and region
for Spark's s3a connector and the state layer's pyarrow (the settings, else the AWS variables)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pyspark
import pytest

from pipelines.settings import DEFAULT_CREDENTIALS_PROVIDER, EspSettings, ObjectStoreSettings, SettingsError
from pipelines.spark_session import MissingJarsError, object_store_session

REPO_ROOT = Path(__file__).resolve().parents[3]
POM = "{http://maven.apache.org/POM/4.0.0}"


def _pom_property(name: str) -> str:
    value = ET.parse(REPO_ROOT / "infra" / "jvm" / "pom.xml").getroot().find(f"{POM}properties/{POM}{name}")
    assert value is not None and value.text
    return value.text


def test_hadoop_aws_matches_the_hadoop_pyspark_bundles():
    bundled = [p.name for p in (Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar")]
    assert len(bundled) == 1
    version = re.fullmatch(r"hadoop-client-api-(.+)\.jar", bundled[0])
    assert version is not None and _pom_property("hadoop.version") == version.group(1)
    modules = ET.parse(REPO_ROOT / "infra" / "jvm" / "pom.xml").getroot().findall(f"{POM}modules/{POM}module")
    assert "spark-s3a" in {m.text for m in modules}


@pytest.fixture
def settings(tmp_path) -> EspSettings:
    """Settings whose jars folder holds (empty) stand-ins for the resolved jars."""
    for group, names in {
        "spark-kafka": ["spark-sql-kafka-0-10_2.13-4.2.0.jar"],
        "spark-s3a": ["hadoop-aws-3.5.0.jar", "bundle-2.35.4.jar"],
    }.items():
        (tmp_path / "jars" / group).mkdir(parents=True)
        for name in names:
            (tmp_path / "jars" / group / name).touch()
    return EspSettings(project_root=tmp_path, jars_dir_name="jars")


def test_local_roots_change_nothing(settings):
    environ: dict[str, str] = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}
    roots = ["/srv/streams/wc", "file:///srv/streams/wc"]
    assert object_store_session(settings, roots, environ) == {}
    assert environ == {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}


def test_an_object_store_root_takes_the_aws_variables(settings, tmp_path):
    environ = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000/", "AWS_DEFAULT_REGION": "eu-west-1"}
    conf = object_store_session(settings, ["/local", "s3a://bucket/wc"], environ)
    jars = f"{tmp_path}/jars/spark-s3a/bundle-2.35.4.jar:{tmp_path}/jars/spark-s3a/hadoop-aws-3.5.0.jar"
    assert conf == {
        "spark.driver.extraClassPath": jars,
        "spark.executor.extraClassPath": jars,
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.aws.credentials.provider": DEFAULT_CREDENTIALS_PROVIDER,
        "spark.executorEnv.AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "spark.executorEnv.AWS_REGION": "eu-west-1",
        "spark.executorEnv.AWS_DEFAULT_REGION": "eu-west-1",
    }
    # pyarrow in this process (the state layer) reads what Spark was told.
    assert (environ["AWS_ENDPOINT_URL"], environ["AWS_REGION"]) == ("http://127.0.0.1:9000", "eu-west-1")


def test_the_settings_win_over_the_environment_and_reach_it(settings):
    store = {"endpoint_url": "https://store.example:9443", "path_style_access": False, "region": "r1"}
    configured = settings.model_copy(update={"object_store": ObjectStoreSettings(**store)})
    environ = {"AWS_ENDPOINT_URL": "http://elsewhere:1", "AWS_REGION": "r2", "AWS_SECRET_ACCESS_KEY": "s"}
    conf = object_store_session(configured, ["s3://bucket/wc"], environ)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "https://store.example:9443"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "r1"
    assert (environ["AWS_ENDPOINT_URL"], environ["AWS_REGION"]) == ("https://store.example:9443", "r1")
    assert not any("SECRET" in key or value == "s" for key, value in conf.items())  # credentials are never copied


def test_without_an_endpoint_aws_finds_the_region_itself(settings):
    environ: dict[str, str] = {}
    conf = object_store_session(settings, ["s3://bucket/wc"], environ)
    assert not any(k.startswith("spark.executorEnv.") for k in conf)
    assert "spark.hadoop.fs.s3a.endpoint" not in conf and "spark.hadoop.fs.s3a.endpoint.region" not in conf
    assert environ == {}
    environ = {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000", "AWS_ENDPOINT_URL": "http://other:1"}
    conf = object_store_session(settings, ["s3://bucket/wc"], environ)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"  # signed for one; the server ignores it


def test_missing_s3a_jars_say_what_to_run(settings, tmp_path):
    for jar in (tmp_path / "jars" / "spark-s3a").iterdir():
        jar.unlink()
    with pytest.raises(MissingJarsError, match=r"esp infra jars"):
        object_store_session(settings, ["s3://bucket/wc"], {})


def test_object_store_settings_are_typed():
    assert EspSettings.load(object_store={"endpoint_url": "http://127.0.0.1:9000"}).object_store.path_style_access
    with pytest.raises(SettingsError, match="endpoint_url"):
        EspSettings.load(object_store={"endpoint_url": "127.0.0.1:9000"})  # no scheme
    with pytest.raises(SettingsError, match="endpoint_url"):
        EspSettings.load(object_store={"endpoint_url": "http://host:9000/bucket"})  # a bucket is the root's
    for name, field in ObjectStoreSettings.model_fields.items():
        assert field.description, name
