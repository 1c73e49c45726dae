"""Resolve esp's JVM jars from Maven Central with the project's own pom (infra/jvm)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from orchestration.stack.errors import StackError, ToolMissingError

LOCAL_FS_GROUP = "local-fs"
"""esp's Hadoop local file system classes, compiled from infra/jvm/local-fs (`pipelines.spark_session`)."""
CORE_GROUPS = ("kafka", "spark-kafka", LOCAL_FS_GROUP)
"""What every stack needs: the broker, Spark's Kafka connector and esp's local file system classes."""
OBJECT_STORE_GROUP = "spark-s3a"
"""Hadoop's s3a connector and the AWS SDK bundle (~690 MB): only for stream folders on an object
store, so resolved only when asked (`esp infra jars --object-store`, `esp infra up` with the
object store or the streams' folder on one)."""
_MODULES = {
    "kafka": "kafka-broker",
    "spark-kafka": "spark-kafka",
    LOCAL_FS_GROUP: "local-fs",
    OBJECT_STORE_GROUP: "spark-s3a",
}
"""The pom module (infra/jvm/<module>) that resolves each group."""


@dataclass(frozen=True)
class JvmLayout:
    """Where the pom lives and where its jars go."""

    project_root: Path
    jars_dir: Path

    @property
    def pom(self) -> Path:
        return self.project_root / "infra" / "jvm" / "pom.xml"

    @property
    def maven_settings(self) -> Path:
        return self.project_root / "infra" / "jvm" / "settings.xml"

    def group_dir(self, group: str) -> Path:
        return self.jars_dir / group


def require_tool(name: str, install_hint: str) -> str:
    """Path of an executable on PATH, or a ToolMissingError saying what to install."""
    found = shutil.which(name)
    if found is None:
        raise ToolMissingError(f"`{name}` is not on PATH; install {install_hint}")
    return found


def jar_groups(object_store: bool) -> tuple[str, ...]:
    """The groups a stack needs: the core ones, and the s3a connector for an object store."""
    return CORE_GROUPS + ((OBJECT_STORE_GROUP,) if object_store else ())


def jars_present(layout: JvmLayout, groups: tuple[str, ...] = CORE_GROUPS) -> bool:
    return all(any(layout.group_dir(g).glob("*.jar")) for g in groups)


def ensure_jars(layout: JvmLayout, force: bool = False, object_store: bool = False) -> bool:
    """Resolve the core jars (and the s3a ones with `object_store`) unless already there; `force`
    resolves them again. True when Maven ran."""
    require_tool("java", "a Java 17+ JDK (e.g. `apt-get install openjdk-17-jdk-headless`)")
    wanted = jar_groups(object_store)
    missing = wanted if force else tuple(g for g in wanted if not jars_present(layout, (g,)))
    if not missing:
        return False
    mvn = require_tool("mvn", "Apache Maven (e.g. `apt-get install maven`)")
    for group in missing:
        # Maven only adds jars: a version the pom no longer names would stay on the classpath.
        shutil.rmtree(layout.group_dir(group), ignore_errors=True)
    command = [
        mvn,
        "-q",
        "-B",
        "-s",
        str(layout.maven_settings),
        "-f",
        str(layout.pom),
        "package",
        "-pl",
        ",".join(_MODULES[g] for g in missing),
        f"-Djars.dir={layout.jars_dir}",
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise StackError(f"Maven could not resolve esp's jars (exit {result.returncode}):\n{tail}")
    if not jars_present(layout, missing):
        raise StackError(f"Maven finished but no jars appeared under {layout.jars_dir}")
    return True


def classpath(layout: JvmLayout, group: str) -> str:
    """A java -cp string for one jar group."""
    jars = sorted(layout.group_dir(group).glob("*.jar"))
    if not jars:
        raise StackError(f"no jars in {layout.group_dir(group)}; run `esp infra jars` first")
    return ":".join(str(j) for j in jars)
