"""esp's Spark sessions open local paths with esp's java.nio file system (infra/jvm/local-fs): a
micro-batch starts no `chmod` or `readlink` process, and files, folders and links behave as with
Hadoop's own local file system (same permissions, same link status, same errors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


def _hadoop(spark):
    return spark._jvm.org.apache.hadoop


def _local_fs(spark):
    return _hadoop(spark).fs.FileSystem.getLocal(spark._jsc.hadoopConfiguration())


def _path(spark, path: Path):
    return _hadoop(spark).fs.Path(str(path))


def _permission(spark, mode: int):
    return _hadoop(spark).fs.permission.FsPermission(mode)


def test_both_hadoop_apis_open_local_paths_with_esps_classes(spark):
    assert _local_fs(spark).getRaw().getClass().getName() == "dev.esp.hadoop.NioRawLocalFileSystem"
    context = _hadoop(spark).fs.FileContext.getLocalFSFileContext(spark._jsc.hadoopConfiguration())
    assert context.getDefaultFileSystem().getClass().getName() == "dev.esp.hadoop.NioLocalFs"


def test_benchmarks_record_the_local_file_system(spark):
    from benchmarks.spark_runs import machine

    assert machine(spark)["local_fs"] == "dev.esp.hadoop.NioLocalFileSystem"


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o750, 0o777, 0o000, 0o1777])
def test_permissions_are_set_as_asked(spark, tmp_path, mode):
    folder = tmp_path / "folder"
    _local_fs(spark).mkdirs(_path(spark, folder), _permission(spark, 0o755))
    file = folder / "file"
    file.touch()
    target = file if mode < 0o1000 else folder  # the sticky bit: a folder's, set by Hadoop's own way
    _local_fs(spark).setPermission(_path(spark, target), _permission(spark, mode))
    assert target.stat().st_mode & 0o7777 == mode


def test_created_files_and_folders_get_hadoops_modes(spark, tmp_path):
    fs = _local_fs(spark)
    stream = fs.create(_path(spark, tmp_path / "a" / "b" / "file"), True)
    stream.write(bytearray(b"esp"))
    stream.close()
    umask = int(spark._jsc.hadoopConfiguration().get("fs.permissions.umask-mode", "022"), 8)
    assert (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o777 & ~umask
    assert (tmp_path / "a" / "b" / "file").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "a" / "b" / "file").read_bytes() == b"esp"


def test_a_missing_path_is_not_found(spark, tmp_path):
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        _local_fs(spark).setPermission(_path(spark, tmp_path / "missing"), _permission(spark, 0o644))
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        _local_fs(spark).getFileLinkStatus(_path(spark, tmp_path / "missing"))


def test_link_status_tells_links_from_files(spark, tmp_path):
    file = tmp_path / "file"
    file.write_text("12345")
    link = tmp_path / "link"
    os.symlink(file, link)
    raw = _local_fs(spark).getRaw()
    file_status = raw.getFileLinkStatus(_path(spark, file))
    assert not file_status.isSymlink() and file_status.getLen() == 5 and file_status.isFile()
    link_status = raw.getFileLinkStatus(_path(spark, link))
    assert link_status.isSymlink() and link_status.getSymlink().toUri().getPath() == str(file)
    dangling = tmp_path / "dangling"
    os.symlink(tmp_path / "nowhere", dangling)
    assert raw.getFileLinkStatus(_path(spark, dangling)).isSymlink()


def test_a_checkpointed_stream_starts_no_process_per_batch(tmp_path):
    """Run in its own process: the JVM must start with the recording `chmod` and `readlink`."""
    found = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("local_fs_processes.py")), str(tmp_path), "nio", "4"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert found.returncode == 0, found.stderr[-3000:]
    counts = json.loads(found.stdout.strip().splitlines()[-1])
    assert counts["batches"] >= 4
    assert counts["control_processes"] == 1  # the recorders see what the JVM starts
    assert counts["batch_processes"] == 0, (tmp_path / "processes.log").read_text()
