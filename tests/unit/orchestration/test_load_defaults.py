"""The load generator's Dagster config and `esp load` take their defaults from `LoadSpec`: an
option left unset keeps LoadSpec's default, so the three can never disagree."""

from types import SimpleNamespace
from typing import get_args

import pytest
import typer
from typer.testing import CliRunner

import pipelines.load
from orchestration.cli import load as load_cli
from orchestration.resources import KafkaResource
from orchestration.streams.load_job import (
    Distribution,
    Kind,
    LoadRunConfig,
    Profile,
    load_generator_job,
    load_options,
)
from pipelines.load.spec import DistributionName, LoadSpec, ProfileName, RecordKind


def test_an_empty_run_config_is_load_spec_defaults() -> None:
    assert load_options(LoadRunConfig()) == {}
    assert LoadSpec.model_validate(load_options(LoadRunConfig())) == LoadSpec()


def test_every_run_config_option_is_a_load_spec_field_described_by_it() -> None:
    for name, config_field in LoadRunConfig.model_fields.items():
        assert name in LoadSpec.model_fields, name
        assert config_field.default is None, name
        assert (config_field.description or "").startswith(LoadSpec.model_fields[name].description or "?"), name


def test_the_run_config_choices_are_load_spec_literals() -> None:
    assert [c.value for c in Profile] == list(get_args(ProfileName))
    assert [c.value for c in Kind] == list(get_args(RecordKind))
    assert [c.value for c in Distribution] == list(get_args(DistributionName))


def test_options_set_in_the_launchpad_reach_the_spec_and_nothing_else(monkeypatch, settings) -> None:
    specs: list[LoadSpec] = []

    def run_load(spec: LoadSpec, connection: object, on_progress: object) -> SimpleNamespace:
        specs.append(spec)
        return SimpleNamespace(records_sent=0, target_records=0, elapsed_s=0.0)

    monkeypatch.setattr(pipelines.load, "run_load", run_load)
    chosen = {"profile": "esault", "distribution": "zipf", "peak_rate": 2000.0, "topic": "clicks"}
    kafka = KafkaResource(settings=settings)
    for config in (chosen, {}):
        run_config = {"ops": {"generate_load": {"config": config}}}
        assert load_generator_job.execute_in_process(run_config=run_config, resources={"kafka": kafka}).success
    assert specs == [LoadSpec(profile="esault", distribution="zipf", peak_rate=2000.0, topic="clicks"), LoadSpec()]


@pytest.fixture
def spec_of_command(monkeypatch: pytest.MonkeyPatch):
    """The LoadSpec an `esp load …` command line builds (it stops before contacting Kafka)."""
    built: list[LoadSpec] = []
    original = load_cli._spec

    def capture(**fields: object) -> LoadSpec:
        built.append(original(**fields))
        return built[-1]

    def no_kafka(*args: object) -> None:
        raise typer.Exit(0)

    monkeypatch.setattr(load_cli, "_spec", capture)
    monkeypatch.setattr(load_cli, "_connection", no_kafka)

    def run(*args: str) -> LoadSpec:
        result = CliRunner().invoke(load_cli.load_app, list(args))
        assert result.exit_code == 0, result.output
        return built[-1]

    return run


def test_esp_load_run_without_options_is_load_spec_defaults(spec_of_command) -> None:
    assert spec_of_command("run") == LoadSpec()
    assert spec_of_command("run", "--dist", "zipf", "--peak", "50") == LoadSpec(distribution="zipf", peak_rate=50)


def test_esp_load_preload_keeps_its_own_process_default(spec_of_command) -> None:
    # 0 producer processes: a pre-load uses one per CPU (not LoadSpec's single paced producer).
    assert spec_of_command("preload", "--records", "10") == LoadSpec(processes=0)
