"""Which jar groups `ensure_jars` asks Maven for: the core ones (broker, Spark's Kafka connector)
by default, the ~690 MB s3a connector only for an object store, and only the missing ones; a fake
`mvn` on the PATH records the modules it was asked for (`-pl`) and lays out a jar per group."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orchestration.stack.jvm import JvmLayout, ensure_jars, jars_present

FAKE_MVN = """#!/bin/sh
# Record the -pl modules, then lay out one jar per module's group under -Djars.dir.
modules=""; jars=""
while [ $# -gt 0 ]; do
  case "$1" in
    -pl) modules="$2"; shift ;;
    -Djars.dir=*) jars="${1#-Djars.dir=}" ;;
  esac
  shift
done
echo "$modules" >> "$MVN_CALLS"
for module in $(echo "$modules" | tr ',' ' '); do
  case "$module" in kafka-broker) group=kafka ;; *) group="$module" ;; esac
  mkdir -p "$jars/$group" && touch "$jars/$group/$module.jar"
done
"""


@pytest.fixture
def maven_calls(tmp_path, monkeypatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(FAKE_MVN)
    mvn.chmod(mvn.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls.txt"
    calls.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MVN_CALLS", str(calls))
    return calls


def _layout(tmp_path: Path) -> JvmLayout:
    return JvmLayout(project_root=tmp_path, jars_dir=tmp_path / "jars")


def test_the_core_jars_only_unless_an_object_store_asks_for_s3a(tmp_path, maven_calls):
    layout = _layout(tmp_path)
    assert ensure_jars(layout)
    assert maven_calls.read_text().split() == ["kafka-broker,spark-kafka,local-fs"]
    assert jars_present(layout) and not (layout.jars_dir / "spark-s3a").exists()
    assert not ensure_jars(layout)  # present: Maven not run again
    assert ensure_jars(layout, object_store=True)
    assert maven_calls.read_text().split() == [
        "kafka-broker,spark-kafka,local-fs",
        "spark-s3a",
    ]  # only what was missing
    assert jars_present(layout, ("spark-s3a",))


def test_force_resolves_every_wanted_group_again(tmp_path, maven_calls):
    layout = _layout(tmp_path)
    ensure_jars(layout, object_store=True)
    assert ensure_jars(layout, force=True)
    assert maven_calls.read_text().split() == [
        "kafka-broker,spark-kafka,local-fs,spark-s3a",
        "kafka-broker,spark-kafka,local-fs",
    ]
