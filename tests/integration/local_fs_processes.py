"""Run as a script by `test_nio_local_fs`: a streaming query with a checkpoint and Parquet output in
esp's Spark session, with `chmod` and `readlink` on the PATH replaced by recorders, so that every
process Hadoop starts for them is counted. Prints one JSON line: the processes the query's batches
started, and those of one permission set through Hadoop's own local file system (the control: it
shows the recorders see what the JVM starts)."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

RECORDED = ("chmod", "readlink")


def install_recorders(bin_dir: Path, log: Path) -> None:
    """Put a `chmod` and a `readlink` first on this process's PATH (the JVM inherits it) that log
    their call to `log`, then run the real command."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for command in RECORDED:
        real = next(Path(d) / command for d in os.environ["PATH"].split(os.pathsep) if (Path(d) / command).is_file())
        script = bin_dir / command
        script.write_text(f'#!/bin/sh\necho "{command} $*" >> "{log}"\nexec "{real}" "$@"\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def _lines(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def main(work: Path, nio_local_fs: bool, batches: int) -> dict[str, int]:
    log = work / "processes.log"
    install_recorders(work / "bin", log)

    from pipelines.settings import EspSettings, SparkSettings
    from pipelines.spark_session import build_spark_session

    repo_root = Path(__file__).resolve().parents[2]
    settings = SparkSettings(master="local[2]", ui_enabled=False, shuffle_partitions=2, nio_local_fs=nio_local_fs)
    spark = build_spark_session(EspSettings(project_root=repo_root, spark=settings))
    table = str(work / "table")

    def write(df, batch_id: int) -> None:
        df.groupBy("k").count().write.mode("append").parquet(table)

    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 100)
        .load()
        .selectExpr("value % 10 AS k")
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    # The query's start (and its first batch) make folders once; count the steady batches only.
    while query.lastProgress is None or query.lastProgress["batchId"] < 1:
        time.sleep(0.1)
    first, before = query.lastProgress["batchId"], _lines(log)
    while query.lastProgress["batchId"] < first + batches:
        time.sleep(0.1)
    last, after = query.lastProgress["batchId"], _lines(log)
    query.stop()

    jvm = spark._jvm
    hadoop = jvm.org.apache.hadoop
    control = work / "control"
    control.touch()
    raw = hadoop.fs.RawLocalFileSystem()
    raw.initialize(jvm.java.net.URI.create("file:///"), spark._jsc.hadoopConfiguration())
    raw.setPermission(hadoop.fs.Path(str(control)), hadoop.fs.permission.FsPermission(0o600))
    return {"batches": last - first, "batch_processes": after - before, "control_processes": _lines(log) - after}


if __name__ == "__main__":
    work_dir, mode, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    print(json.dumps(main(work_dir, mode == "nio", n)))
