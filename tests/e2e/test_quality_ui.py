"""Through the real webserver + daemon (`esp ui`) and its GraphQL API: the schedules and asset
checks are listed; the post-rescale state check runs as a launched run and reports GX metadata.

The partition backfill of two days launched from the UI is the browser test's
(tests/browser/test_steer.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.names import (
    CODE_LOCATION,
    DEAD_LETTER_VOLUME_CHECK,
    NIGHTLY_BACKFILL_SCHEDULE,
    RECONCILIATION_CHECK,
    RESULTS_SUITE_CHECK,
    STATE_AFTER_RESCALE_CHECK,
    VALIDATION_JOB,
    VALIDATION_SCHEDULE,
    dead_letters_asset_key,
    layout_asset_key,
    results_asset_key,
)
from pipelines.streams.names import elastic_path, local_state_path
from tests.e2e.dagster_ui import graphql, running_ui, wait_for_status

pytestmark = pytest.mark.e2e

WORDS = {f"w{i}": i + 1 for i in range(50)}

REPOSITORIES = """{ repositoriesOrError { ... on RepositoryConnection { nodes {
  schedules { name cronSchedule scheduleState { status } } } } } }"""
CHECKS = """{ assetNodes { assetKey { path } assetChecksOrError { ... on AssetChecks { checks { name } } } } }"""
LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""
CHECK_EXECUTIONS = """query($key: AssetKeyInput!, $name: String!) {
  assetCheckExecutions(assetKey: $key, checkName: $name, limit: 1) {
    runId status evaluation { success metadataEntries { label
      ... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue } } } } }"""


def make_rescaled_state(root: Path) -> None:
    """Word counts over 2 channels at batch 0, then a real migration to 3 channels."""
    from elasticity.hashing import hash_str
    from elasticity.layout import Layout
    from elasticity.migration import Migrator
    from elasticity.migration.registry import LayoutRegistry
    from elasticity.state import Int64Codec, Location, RocksBackend

    elastic = elastic_path(root)
    layout = LayoutRegistry(Location.of(elastic)).initialize(Layout.uniform(2))
    backend = RocksBackend(Int64Codec(), durable=elastic, local_dir=local_state_path(root))
    for channel in layout.channels:
        with backend.open(channel).begin(0) as tx:
            for word, count in WORDS.items():
                if layout.owner(hash_str(word)) == channel:
                    tx.put(word, count)
    Migrator(Location.of(elastic), backend).migrate(layout.scale_out(1))
    backend.close()


def test_quality_schedules_checks_and_the_state_check_run(tmp_path):
    root = tmp_path / "run" / "streams" / "wordcount"
    make_rescaled_state(root)
    spark = {"master": "local[1]", "ui_enabled": False, "shuffle_partitions": 2}
    with running_ui(tmp_path, {"spark": spark}) as port:
        schedules = {
            s["name"]: s
            for node in graphql(port, REPOSITORIES)["repositoriesOrError"]["nodes"]
            for s in node["schedules"]
        }
        assert schedules[NIGHTLY_BACKFILL_SCHEDULE]["cronSchedule"] == "15 1 * * *"
        assert schedules[VALIDATION_SCHEDULE]["scheduleState"]["status"] == "RUNNING"
        checks = {
            (tuple(n["assetKey"]["path"]), c["name"])
            for n in graphql(port, CHECKS)["assetNodes"]
            for c in (n["assetChecksOrError"].get("checks") or [])
        }
        assert {
            (tuple(results_asset_key("wordcount").path), RESULTS_SUITE_CHECK),
            (tuple(results_asset_key("wordcount").path), RECONCILIATION_CHECK),
            (tuple(dead_letters_asset_key("wordcount").path), DEAD_LETTER_VOLUME_CHECK),
            (tuple(layout_asset_key("wordcount").path), STATE_AFTER_RESCALE_CHECK),
        } <= checks

        # The post-rescale state check, launched alone as the UI's "Execute check" does.
        layout_path = list(layout_asset_key("wordcount").path)
        selector = {
            "repositoryLocationName": CODE_LOCATION,
            "repositoryName": "__repository__",
            "jobName": VALIDATION_JOB,
            "assetSelection": [],
            "assetCheckSelection": [{"assetKey": {"path": layout_path}, "name": STATE_AFTER_RESCALE_CHECK}],
        }
        launched = graphql(port, LAUNCH, {"params": {"selector": selector, "runConfigData": {}}})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        assert wait_for_status(port, launched["run"]["runId"], {"SUCCESS", "FAILURE"}, timeout_s=300) == "SUCCESS"
        execution = graphql(port, CHECK_EXECUTIONS, {"key": {"path": layout_path}, "name": STATE_AFTER_RESCALE_CHECK})
        evaluation = execution["assetCheckExecutions"][0]["evaluation"]
        metadata = {e["label"]: e.get("intValue", e.get("floatValue")) for e in evaluation["metadataEntries"]}
        assert evaluation["success"] is True
        assert metadata["keys"] == len(WORDS) and metadata["sum_of_counts"] == sum(WORDS.values())
        assert metadata["layout_epoch"] == 1 and metadata["gx_success_percent"] == 100.0
