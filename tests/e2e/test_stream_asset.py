"""The word-count stream as a Dagster asset on the real stack: launched through the UI's API,
it reports live observations with throughput; terminating the run stops the query cleanly."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from orchestration.names import op_name, stream_asset_key, stream_job_name
from pipelines.streams.names import checkpoint_path
from tests.e2e.dagster_ui import TERMINATE, graphql, launch, running_ui, wait_for_status
from tests.integration.streams import produce

pytestmark = pytest.mark.e2e

OBSERVATIONS = """
query($key: AssetKeyInput!) { assetOrError(assetKey: $key) { ... on Asset {
  assetObservations(limit: 50) { runId metadataEntries { label
    ... on FloatMetadataEntry { floatValue } ... on IntMetadataEntry { intValue } } } } } }"""


def _observed_throughputs(port: int, run_id: str) -> list[float]:
    key = {"path": list(stream_asset_key("wordcount").path)}
    observations = graphql(port, OBSERVATIONS, {"key": key})["assetOrError"]["assetObservations"]
    values = []
    for observation in observations:
        if observation["runId"] != run_id:
            continue
        entries = {e["label"]: e.get("floatValue", e.get("intValue")) for e in observation["metadataEntries"]}
        values.append(float(entries.get("processed_rows_per_s") or 0))
    return values


def test_stream_asset_observes_and_stops_cleanly(tmp_path, bootstrap, topic_factory):
    from pipelines.streams.metrics import checkpoint_offsets

    topic = topic_factory("dag-words", partitions=2)
    host, port_ = bootstrap.split(":")
    settings = {
        "kafka": {"host": host, "client_port": int(port_)},
        "spark": {"master": "local[2]", "ui_enabled": False, "shuffle_partitions": 2},
    }
    stop_load = threading.Event()

    def load() -> None:
        i = 0
        while not stop_load.is_set():
            produce(bootstrap, topic, [f"alpha beta w{(i + j) % 50}" for j in range(200)])
            i += 200
            time.sleep(0.5)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        with running_ui(tmp_path, settings) as port:
            run_config = {
                "ops": {
                    op_name(stream_asset_key("wordcount")): {
                        "config": {"channels": 2, "trigger_seconds": 0.5, "observe_every_s": 2.0, "input_topic": topic}
                    }
                }
            }
            run_id = launch(port, stream_job_name("wordcount"), run_config)
            wait_for_status(port, run_id, {"STARTED"})
            deadline = time.monotonic() + 240
            while sum(1 for t in _observed_throughputs(port, run_id) if t > 0) < 2:
                assert time.monotonic() < deadline, "fewer than two observations with throughput"
                assert wait_for_status(port, run_id, {"STARTED", "FAILURE", "CANCELED"}) == "STARTED"
                time.sleep(2)
            graphql(port, TERMINATE, {"id": run_id})
            assert wait_for_status(port, run_id, {"CANCELED", "FAILURE", "SUCCESS"}) == "CANCELED"
    finally:
        stop_load.set()
        loader.join(timeout=10)

    checkpoint = Path(checkpoint_path(tmp_path / "run" / "streams" / "wordcount"))
    commits = {int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")}
    offsets = {int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")}
    # Stopped between batches: every planned batch but at most the one refused at its start is committed.
    assert commits and offsets - commits <= {max(offsets)}
    assert checkpoint_offsets(str(checkpoint), topic)
