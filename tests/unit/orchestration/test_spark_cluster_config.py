"""esp's Spark standalone cluster, without starting it: its settings, the master URL the streams
default to, the daemons' command lines, environment and properties, the sessions' executor sizing,
a pid file that names someone else's process, and `esp infra status` while it is stopped."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestration.stack.spark_cluster import MASTER_CLASS, WORKER_CLASS, SparkCluster, pyspark_home, spark_class
from pipelines.settings import EspSettings, SettingsError, SparkClusterSettings, SparkSettings
from pipelines.spark_session import session_conf


def test_defaults_two_one_core_workers_on_loopback_and_off():
    cluster = SparkClusterSettings()
    assert (cluster.enabled, cluster.workers, cluster.cores_per_worker, cluster.memory_per_worker) == (
        False,
        2,
        1,
        "1g",
    )
    assert cluster.master_url == "spark://127.0.0.1:7077"
    assert cluster.webui_url == "http://127.0.0.1:8080"
    assert cluster.ports == [7077, 8080, 7078, 8081, 7079, 8082]


def test_the_streams_master_is_the_clusters_once_enabled_unless_set():
    assert EspSettings().spark.master == "local[*]"
    enabled = {"enabled": True, "master_port": 17077}
    assert EspSettings.load(spark_cluster=enabled).spark.master == "spark://127.0.0.1:17077"
    assert EspSettings.load(spark_cluster=enabled, spark={"ui_enabled": False}).spark.master == (
        "spark://127.0.0.1:17077"
    )
    assert EspSettings.load(spark_cluster=enabled, spark={"master": "local[2]"}).spark.master == "local[2]"
    assert EspSettings.load(spark_cluster={"master_port": 17077}).spark.master == "local[*]"
    # Models as well as files; a child process's settings file keeps the derived master.
    built = EspSettings(spark_cluster=SparkClusterSettings(enabled=True), spark=SparkSettings(ui_enabled=False))
    assert (built.spark.master, built.spark.ui_enabled) == ("spark://127.0.0.1:7077", False)
    assert EspSettings(spark=SparkSettings(master="local[1]"), spark_cluster={"enabled": True}).spark.master == (
        "local[1]"
    )
    assert EspSettings.load(**built.to_file_data()).spark.master == "spark://127.0.0.1:7077"


def test_settings_errors_name_the_problem():
    with pytest.raises(SettingsError, match="overlap"):
        EspSettings.load(spark_cluster={"master_port": 8081})  # worker 1's port is the master UI's
    with pytest.raises(SettingsError, match="65535"):
        EspSettings.load(spark_cluster={"master_port": 65535})
    with pytest.raises(SettingsError, match="memory_per_worker"):
        EspSettings.load(spark_cluster={"memory_per_worker": "lots"})


def test_command_lines_run_the_installed_pysparks_spark_class(tmp_path):
    import pyspark

    home = pyspark_home()
    assert home == Path(pyspark.__file__).parent
    launcher = spark_class(home)
    assert launcher == home / "bin" / "spark-class" and os.access(launcher, os.X_OK)

    cluster = SparkCluster(SparkClusterSettings(workers=2, memory_per_worker="768m"), tmp_path)
    root = tmp_path / "spark-cluster"
    assert cluster.master.command(launcher) == [
        str(launcher),
        MASTER_CLASS,
        *("--host", "127.0.0.1", "--port", "7077", "--webui-port", "8080"),
        *("--properties-file", str(root / "master" / "spark.properties")),
    ]
    assert cluster.workers[2].command(launcher) == [
        str(launcher),
        WORKER_CLASS,
        "spark://127.0.0.1:7077",
        *("--host", "127.0.0.1", "--port", "7079", "--webui-port", "8082"),
        *("--cores", "1", "--memory", "768m", "--work-dir", str(root / "worker-2" / "work")),
        *("--properties-file", str(root / "worker-2" / "spark.properties")),
    ]
    assert list(cluster.daemons) == ["master", "worker-1", "worker-2"]


def test_daemons_bind_loopback_with_read_only_uis_and_bounded_work_folders(tmp_path):
    cluster = SparkCluster(SparkClusterSettings(daemon_heap="256m"), tmp_path)
    environment = cluster.environment({"PATH": "/bin", "SPARK_HOME": "/elsewhere"}, pyspark_home())
    assert environment["SPARK_LOCAL_IP"] == environment["SPARK_PUBLIC_DNS"] == "127.0.0.1"
    assert (environment["SPARK_HOME"], environment["SPARK_DAEMON_MEMORY"]) == (str(pyspark_home()), "256m")
    assert environment["PATH"] == "/bin"

    cluster.master.render_properties()
    cluster.workers[1].render_properties()
    master = _properties(cluster.master.paths.properties_file)
    worker = _properties(cluster.workers[1].paths.properties_file)
    assert master == {"spark.ui.killEnabled": "false", "spark.master.rest.enabled": "false"}
    assert worker["spark.ui.killEnabled"] == "false"
    assert worker["spark.worker.cleanup.enabled"] == "true"
    assert worker["spark.executor.logs.rolling.strategy"] == "size"
    assert worker["spark.local.dir"] == str(tmp_path / "spark-cluster" / "worker-1" / "local")


def _properties(path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return dict(line.split(" ", 1) for line in lines)


def test_a_session_on_the_cluster_fills_each_worker_with_one_executor_of_this_venv(tmp_path):
    jars = [tmp_path / "spark-sql-kafka.jar"]
    settings = EspSettings.load(spark_cluster={"enabled": True, "memory_per_worker": "768m"})
    conf = session_conf(settings, jars)
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert (conf["spark.executor.cores"], conf["spark.executor.memory"]) == ("1", "768m")
    assert conf["spark.jars"] == str(jars[0])  # local paths: the driver serves them to the executors
    assert conf["spark.pyspark.python"] == sys.executable
    # The user's spark.conf wins; a local master gets no executor sizing.
    mine = EspSettings.load(spark_cluster={"enabled": True}, spark={"conf": {"spark.executor.memory": "2g"}})
    assert session_conf(mine, jars)["spark.executor.memory"] == "2g"
    assert "spark.executor.memory" not in session_conf(EspSettings(), jars)


def test_a_pid_file_naming_another_process_is_stale(tmp_path):
    cluster = SparkCluster(SparkClusterSettings(), tmp_path)
    cluster.master.paths.root.mkdir(parents=True)
    cluster.master.paths.pid_file.write_text(str(os.getpid()))  # this pytest: no Spark master of ours
    assert cluster.master.running_pid() is None
    status = cluster.status()
    assert status["master"].running is False
    assert "stale pid file" in status["master"].note
    assert status["worker-1"] == status["worker-1"].__class__(False, None, "127.0.0.1:7078", False, "")
    assert cluster.down() == []
    assert not cluster.master.paths.pid_file.exists()


def test_infra_status_shows_a_stopped_cluster_and_exits_3(tmp_path):
    from orchestration.cli.main import app

    config = tmp_path / "esp.json"
    # Ports nothing listens on: the stopped Kafka broker is not asked either.
    config.write_text(
        json.dumps(
            {
                "run_dir_name": str(tmp_path / "run"),
                "spark_cluster": {"enabled": True, "master_port": 1, "webui_port": 4},
            }
        )
    )
    result = CliRunner().invoke(app, ["infra", "status", "--config", str(config)], terminal_width=200)
    assert result.exit_code == 3, result.output
    rows = [line for line in result.output.splitlines() if "spark " in line]
    cells = [[cell.strip() for cell in row.split("│")[1:4]] for row in rows]
    assert cells == [
        ["spark master", "stopped", "-"],
        ["spark worker-1", "stopped", "-"],
        ["spark worker-2", "stopped", "-"],
    ]
    assert "spark://127.0.0.1:1" in rows[0]
