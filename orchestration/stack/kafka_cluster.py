"""Start, stop and inspect the local KRaft Kafka cluster (`kafka.nodes: 3`).

Every node is a broker and a controller (three controllers in the quorum), all on `kafka.host`,
node n on the single broker's ports plus (n - 1) × `kafka.node_port_step`. Node n's data, logs,
rendered config and pid file live under `<run_dir>/kafka-cluster/node-<n>`. Each node is a
`KafkaNode`, as the single broker is; the cluster only differs in the quorum (every node's
controller), the replication of its topics (3 replicas, min.insync.replicas 2) and the first
format: all nodes together, with one cluster id and `--initial-controllers` naming the three
controllers and their metadata folders' directory ids (Kafka 4's dynamic quorum).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

from orchestration.stack.errors import BrokerNotAnsweringError, StackError
from orchestration.stack.jvm import JvmLayout
from orchestration.stack.kafka_broker import (
    BrokerAlreadyRunning,
    BrokerStatus,
    KafkaNode,
    NodeRole,
    ask_brokers,
    new_cluster_id,
)
from pipelines.settings import KafkaSettings

CLUSTER_FOLDER = "kafka-cluster"


class KafkaCluster:
    """The local cluster's nodes, by node id (1 to `kafka.nodes`)."""

    def __init__(self, settings: KafkaSettings, run_dir: Path, jvm: JvmLayout) -> None:
        self.settings = settings
        self.root = run_dir / CLUSTER_FOLDER
        controllers = ",".join(self._controller(n) for n in settings.node_ids)
        self.nodes = {
            n: KafkaNode(
                settings.cluster_node(n),
                self.root / f"node-{n}",
                jvm,
                NodeRole(
                    f"Kafka node-{n}",
                    n,
                    controllers,
                    settings.replication_factor,
                    settings.min_insync_replicas,
                    standalone=False,
                ),
            )
            for n in settings.node_ids
        }

    # -- queries -----------------------------------------------------------------------------

    def status(self) -> dict[int, BrokerStatus]:
        """Each node's status, by node id."""
        return {n: node.status() for n, node in self.nodes.items()}

    def brokers(self) -> int | None:
        """How many unfenced brokers the cluster's metadata lists (None when no node answers)."""
        described = ask_brokers(self.settings.connection, lambda admin: admin.describe_cluster())
        return None if described is None else sum(not broker.get("is_fenced") for broker in described["brokers"])

    # -- lifecycle ---------------------------------------------------------------------------

    def up(self) -> dict[int, BrokerStatus]:
        """Start every node that is not running (a new cluster's storage formatted first), then wait
        until each answers and the cluster lists all its brokers."""
        stopped = [node for node in self.nodes.values() if node.running_pid() is None]
        if not stopped:
            pids = ", ".join(str(node.running_pid()) for node in self.nodes.values())
            raise KafkaClusterAlreadyRunning(
                f"the Kafka cluster is already running (pids {pids}) on {self.settings.bootstrap_servers}"
            )
        java = [node.prepare() for node in stopped][0]
        self.format_storage(java)
        # All spawned before any is waited for: a node answers only once a quorum of controllers runs.
        started = [(node, node.start(java)) for node in stopped]
        for node, process in started:
            node.wait_until_answering(process)
        self._wait_for_all_brokers()
        return self.status()

    def down(self, timeout_s: float = 30.0) -> list[int]:
        """Stop every running node by its pid (SIGTERM to all, then SIGKILL after timeout); the ids
        of those that ran."""
        terminated = {n: node.terminate() for n, node in self.nodes.items()}
        for n, process in terminated.items():
            if process is not None:
                self.nodes[n].reap(process, timeout_s)
        return [n for n, process in terminated.items() if process is not None]

    def kill(self, node_id: int) -> int:
        """SIGKILL one running node by its pid (for failure tests); returns the pid. Its pid file
        stays: status reports it stale, `up` restarts the node."""
        pid = self.nodes[node_id].running_pid()
        if pid is None:
            raise StackError(f"Kafka node-{node_id} is not running")
        os.kill(pid, signal.SIGKILL)
        psutil.Process(pid).wait(timeout=30)
        return pid

    # -- steps -------------------------------------------------------------------------------

    def _controller(self, node_id: int) -> str:
        return f"{self.settings.host}:{self.settings.cluster_node(node_id).controller_port}"

    def format_storage(self, java: str) -> None:
        """Format every node's storage for one new cluster id, unless the cluster was formatted."""
        unformatted = [n for n, node in self.nodes.items() if not node.paths.formatted_marker.exists()]
        if not unformatted:
            return
        if len(unformatted) < len(self.nodes):
            missing = ", ".join(f"node-{n}" for n in unformatted)
            raise StackError(
                f"the storage of {missing} is missing while the other nodes' is not: a controller cannot rejoin "
                f"its quorum with empty storage; stop the cluster and remove {self.root} to start a new one "
                "(its topics are lost)"
            )
        cluster_id = new_cluster_id()
        # A directory id is a Kafka Uuid, as a cluster id is; all nodes are formatted with the same list.
        voters = ",".join(f"{n}@{self._controller(n)}:{new_cluster_id()}" for n in self.nodes)
        for node in self.nodes.values():
            node.format_storage(java, cluster_id, "--initial-controllers", voters)

    def _wait_for_all_brokers(self) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        while (brokers := self.brokers()) != len(self.nodes):
            if time.monotonic() > deadline:
                raise BrokerNotAnsweringError(
                    f"the Kafka cluster on {self.settings.bootstrap_servers} lists {brokers} of its "
                    f"{len(self.nodes)} brokers after {self.settings.start_timeout_s:.0f}s; see {self.root}/node-*/logs"
                )
            time.sleep(0.5)


class KafkaClusterAlreadyRunning(BrokerAlreadyRunning):
    """`up` was asked while every node of our cluster runs."""
