"""The stream catalog: streams declared in YAML are validated when it loads (errors name the
stream and the option), get every Dagster definition a built-in stream gets, and their declared
settings and policy are the defaults a run and the sensors start from."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.streams.assets import StreamRunConfig, run_options
from orchestration.streams.catalog import STREAMS, CatalogError, entry_policy, load_catalog, stream_spec
from pipelines.settings import EspSettings

SESSIONS = """
streams:
  - name: sessions
    job: examples.sessions.job:sessions_job
    input_topic: clicks
    settings: {channels: 2, input_partitions: 3, trigger_seconds: 0.5}
    policy: {slo_s: 5, max_channels: 6, split_merge: false}
"""


def _catalog(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "streams.yaml"
    path.write_text(text)
    return path


def test_a_declared_stream_loads_with_its_settings_and_policy(tmp_path):
    (entry,) = load_catalog(_catalog(tmp_path, SESSIONS))
    assert (entry.name, entry.job, entry.input_topic) == ("sessions", "examples.sessions.job:sessions_job", "clicks")
    spec = stream_spec(EspSettings(project_root=tmp_path), entry)
    assert (spec.channels, spec.input_partitions, spec.trigger_seconds) == (2, 3, 0.5)
    policy = entry_policy(entry, ElasticityPolicy(sample_period_s=7.0))
    assert (policy.slo_s, policy.max_channels, policy.split_merge, policy.sample_period_s) == (5, 6, False, 7.0)


def test_a_missing_catalog_declares_nothing(tmp_path):
    assert load_catalog(tmp_path / "absent.yaml") == ()


def test_a_run_config_overrides_only_what_it_sets(tmp_path):
    (entry,) = load_catalog(_catalog(tmp_path, SESSIONS))
    settings = EspSettings(project_root=tmp_path)
    declared = stream_spec(settings, entry, **run_options(StreamRunConfig()))
    assert (declared.channels, declared.trigger_seconds, declared.snapshots) == (2, 0.5, entry_spec_snapshots(entry))
    overridden = stream_spec(settings, entry, **run_options(StreamRunConfig(channels=5, snapshot_policy="fixed")))
    assert (overridden.channels, overridden.trigger_seconds, overridden.snapshots.policy) == (5, 0.5, "fixed")


def entry_spec_snapshots(entry):
    from pipelines.streams.spec import StreamSpec

    return StreamSpec(name=entry.name, job=entry.job, input_topic=entry.input_topic).snapshots


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (SESSIONS.replace("channels: 2,", "chanels: 2,"), "chanels"),
        (SESSIONS.replace("slo_s: 5", "slo_s: -1"), "slo_s"),
        (SESSIONS.replace("examples.sessions.job:sessions_job", "no-colon"), "module:function"),
        (SESSIONS.replace("name: sessions", "name: wordcount"), "wordcount"),
        (SESSIONS.replace("settings: {", "settings: {root: /tmp/x, "), "root"),
        (SESSIONS + "  - {name: sessions, job: wordcount, input_topic: x}\n", "sessions"),
        ("streams: [", "streams.yaml"),
    ],
    ids=["unknown-setting", "bad-policy", "bad-job", "built-in-name", "identity-in-settings", "twice", "yaml"],
)
def test_a_bad_catalog_fails_naming_the_problem(tmp_path, text, named):
    with pytest.raises(CatalogError, match="streams.yaml") as error:
        load_catalog(_catalog(tmp_path, text))
    assert named in str(error.value)


def test_the_project_catalog_gets_every_definition_a_built_in_stream_gets():
    """The repository's own streams.yaml declares the sessions example; its definitions are generated."""
    from orchestration.definitions import defs
    from orchestration.names import (
        elasticity_sensor_name,
        layout_asset_key,
        policy_asset_key,
        resize_job_name,
        stop_job_name,
        stream_asset_key,
        stream_job_name,
        supervisor_sensor_name,
    )

    declared = load_catalog(Path(__file__).parents[3] / "streams.yaml")
    assert "sessions" in [e.name for e in declared]
    keys = defs.resolve_asset_graph().get_all_asset_keys()
    sensors = {s.name for s in defs.sensors}
    for entry in (*STREAMS, *declared):
        assert {stream_asset_key(entry.name), layout_asset_key(entry.name), policy_asset_key(entry.name)} <= keys
        assert {supervisor_sensor_name(entry.name), elasticity_sensor_name(entry.name)} <= sensors
        for job in (stream_job_name(entry.name), stop_job_name(entry.name), resize_job_name(entry.name)):
            assert defs.resolve_job_def(job) is not None


def test_the_command_line_starts_a_declared_stream_from_its_settings(tmp_path, monkeypatch):
    """`esp stream run --name sessions` takes the catalog's job, topic and settings; options it is
    given win, and a stream nobody declared gets StreamSpec's defaults."""
    from orchestration.cli.stream import _spec
    from orchestration.streams import catalog

    monkeypatch.setattr(catalog, "catalog_streams", lambda: (*STREAMS, *load_catalog(_catalog(tmp_path, SESSIONS))))
    settings = EspSettings(project_root=tmp_path)
    declared = _spec(settings, "sessions", None, None, None, channels=None, trigger_seconds=None)
    assert (declared.job, declared.input_topic, declared.channels, declared.trigger_seconds) == (
        "examples.sessions.job:sessions_job",
        "clicks",
        2,
        0.5,
    )
    given = _spec(settings, "sessions", None, "other", str(tmp_path / "elsewhere"), channels=7)
    assert (given.input_topic, given.channels, given.root) == ("other", 7, str(tmp_path / "elsewhere"))
    plain = _spec(settings, "mine", None, None, None, channels=None)
    assert (plain.job, plain.input_topic, plain.channels) == ("wordcount", "words", 4)
