"""The Dagster code location loads, and the instance config it runs under is well formed."""

from __future__ import annotations

import yaml
from dagster import Definitions


def test_definitions_load():
    from orchestration.definitions import defs

    Definitions.validate_loadable(defs)
    assert defs.resolve_asset_graph().get_all_asset_keys()


def test_instance_config_limits_rescales_and_lives_under_the_run_folder(tmp_path):
    from orchestration.names import RESCALE_TAG
    from orchestration.stack.dagster_home import prepare_dagster_home
    from pipelines.settings import EspSettings
    from tests.conftest import REPO_ROOT

    settings = EspSettings(project_root=REPO_ROOT, run_dir_name=str(tmp_path / "run"))
    home = prepare_dagster_home(settings)
    config = yaml.safe_load((home / "dagster.yaml").read_text())
    assert config["storage"]["sqlite"]["base_dir"].startswith(str(tmp_path))
    limits = config["run_coordinator"]["config"]["tag_concurrency_limits"]
    assert {"key": RESCALE_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in limits
    assert config["run_monitoring"]["enabled"] is True
