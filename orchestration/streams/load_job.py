"""A job that runs the load generator with a chosen profile (eSault trace, square, sine, …).

`LoadRunConfig` is the part of `pipelines.load.LoadSpec` offered in the launchpad: each option
defaults to None, meaning LoadSpec's own default, and carries LoadSpec's description of the
field, so the defaults and their meaning have one source.
"""

from enum import StrEnum
from typing import Any, get_args

from dagster import Config, OpExecutionContext, job, op
from pydantic import Field

from orchestration.names import KIND_TAG, LOAD_GENERATOR_JOB
from orchestration.resources import KafkaResource
from pipelines.load.spec import DistributionName, LoadSpec, ProfileName, RecordKind


def _choices(name: str, literal: Any) -> type[StrEnum]:
    """The values of one of LoadSpec's Literals as a StrEnum (Dagster's config takes an Enum where it
    takes no optional Literal)."""
    return StrEnum(name, [(value, value) for value in get_args(literal)])


Profile = _choices("Profile", ProfileName)
Kind = _choices("Kind", RecordKind)
Distribution = _choices("Distribution", DistributionName)


def _spec_option(name: str) -> str:
    """LoadSpec's description of `name`, and what leaving it unset means here."""
    spec_field = LoadSpec.model_fields[name]
    unset = "LoadSpec's default" if spec_field.default is None else f"LoadSpec's default, {spec_field.default!r}"
    return f"{spec_field.description} (None: {unset})"


class LoadRunConfig(Config):
    """The load to produce: any LoadSpec options set here; the others keep LoadSpec's defaults."""

    profile: Profile | None = Field(None, description=_spec_option("profile"))
    peak_rate: float | None = Field(None, description=_spec_option("peak_rate"))
    duration_s: float | None = Field(None, description=_spec_option("duration_s"))
    speed: float | None = Field(None, description=_spec_option("speed"))
    kind: Kind | None = Field(None, description=_spec_option("kind"))
    topic: str | None = Field(None, description=_spec_option("topic"))
    distribution: Distribution | None = Field(None, description=_spec_option("distribution"))
    zipf_s: float | None = Field(None, description=_spec_option("zipf_s"))
    processes: int | None = Field(None, description=_spec_option("processes"))


def load_options(config: LoadRunConfig) -> dict[str, object]:
    """The LoadSpec options the run config sets (None: LoadSpec's default)."""
    return {name: value for name, value in config.model_dump(mode="json").items() if value is not None}


@op(description="Produce the configured load to Kafka and report sent vs target.")
def generate_load(context: OpExecutionContext, config: LoadRunConfig, kafka: KafkaResource) -> dict:
    from pipelines.load import run_load

    spec = LoadSpec.model_validate(load_options(config))
    report = run_load(spec, kafka.connection(), on_progress=lambda p: None)
    summary = {
        "records_sent": report.records_sent,
        "target_records": report.target_records,
        "elapsed_s": report.elapsed_s,
    }
    context.log.info("load finished: %s", summary)
    return summary


@job(name=LOAD_GENERATOR_JOB, description="Run the load generator once.", tags={KIND_TAG: "load"})
def load_generator_job():
    generate_load()
