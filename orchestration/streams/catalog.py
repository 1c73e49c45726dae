"""The streams esp runs: the two built-in ones and those declared in a YAML catalog, and how a
Dagster run turns one into a StreamSpec.

A declared stream is one YAML entry; esp generates its Dagster definitions (stream asset and job,
supervisor, stop job, resizing asset and job, elasticity sensor, policy asset, dashboard, health
checks) exactly as for the built-in ones:

    streams:
      - name: sessions
        job: examples.sessions.job:sessions_job   # a user job: module:function returning a pipelines.api.Job
        input_topic: clicks
        settings: {channels: 2, input_partitions: 2}   # any StreamSpec option (see `esp stream run --help`)
        policy: {slo_s: 5, max_channels: 6}            # this stream's default elasticity policy

Why a factory and not Dagster Components: Components want the `dg` project layout and its CLI
(`dagster-dg-cli`), which the pinned Dagster does not bring; this catalog keeps the same shape
(YAML in, definitions out) inside the one code location.
"""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from elasticity.state import uris
from orchestration.elasticity.policy import ElasticityPolicy
from pipelines.settings import EspSettings
from pipelines.streams.names import FIRST_STAGE
from pipelines.streams.spec import BUILT_IN_JOBS, StreamSpec

log = logging.getLogger(__name__)

DEFAULT_CATALOG = Path("streams.yaml")
"""The catalog read when none is named: `streams.yaml` in the working directory (the code
location's, i.e. the project root); a missing file declares no stream."""

_IDENTITY = frozenset({"name", "job", "input_topic", "root", "bootstrap_servers", "kafka_security"})


class StreamEntry(BaseModel):
    """One stream esp runs and generates definitions for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$", description="Stream name; prefixes its topics and folders.")
    job: str = Field(description="A built-in job (wordcount, adclicks) or a user job's 'module:function'.")
    input_topic: str = Field(description="Kafka topic the stream reads.")
    load_kind: Literal["words", "ads"] | None = Field(
        None, description="Which built-in load generator feeds it (None: none; user jobs bring their own input)."
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="StreamSpec options of this stream (channels, trigger_seconds, snapshots, admission, ...); "
        "a run's config overrides them.",
    )
    policy: dict[str, Any] = Field(
        default_factory=dict,
        description="This stream's default elasticity policy (ElasticityPolicy options: slo_s, min_channels, "
        "max_channels, split_merge, ...); changes from the UI apply on top.",
    )

    @model_validator(mode="after")
    def _valid_settings(self) -> StreamEntry:
        if reserved := sorted(_IDENTITY & self.settings.keys()):
            raise ValueError(f"stream {self.name}: settings may not set {reserved} (the entry's own fields do)")
        # Built once here so a typo fails when the catalog loads, naming the option.
        StreamSpec(name=self.name, job=self.job, input_topic=self.input_topic, **self.settings)
        ElasticityPolicy(**self.policy)
        return self


class CatalogFile(BaseModel):
    """The YAML catalog: a list of declared streams."""

    model_config = ConfigDict(extra="forbid")

    streams: list[StreamEntry] = Field(default_factory=list, description="The declared streams.")


class CatalogError(ValueError):
    """A catalog file that cannot be used, with the file and what is wrong."""


STREAMS: tuple[StreamEntry, ...] = (
    StreamEntry(name="wordcount", job="wordcount", input_topic="words", load_kind="words"),
    StreamEntry(name="adclicks", job="adclicks", input_topic="ads", load_kind="ads"),
)
"""The built-in streams."""


def load_catalog(path: Path) -> tuple[StreamEntry, ...]:
    """The streams declared in `path` (none if it does not exist); a `CatalogError` naming the problem."""
    if not path.exists():
        return ()
    try:
        data = yaml.safe_load(path.read_text()) or {}
        declared = CatalogFile.model_validate(data).streams
    except (yaml.YAMLError, ValidationError) as error:
        raise CatalogError(f"stream catalog {path}: {error}") from None
    names = [entry.name for entry in (*STREAMS, *declared)]
    if duplicates := sorted({name for name in names if names.count(name) > 1}):
        raise CatalogError(f"stream catalog {path}: stream names used twice (or built in): {duplicates}")
    return tuple(declared)


@cache
def catalog_streams(path: Path = DEFAULT_CATALOG) -> tuple[StreamEntry, ...]:
    """Every stream esp runs: the built-in ones, then those `path` declares."""
    return (*STREAMS, *load_catalog(path))


def is_user_stream(entry: StreamEntry) -> bool:
    """Whether the stream runs a user's job (a `module:function`) rather than a built-in one."""
    return entry.job not in BUILT_IN_JOBS


def entry_stages(entry: StreamEntry) -> tuple[str, ...]:
    """The elastic stages of the stream's job, first stage first: the built-in jobs have one; a user
    job says (`pipelines.api.Job.stage_names`). A user job that cannot be loaded here gets its first
    stage's definitions only, and a warning: its stream reports the error itself when it starts."""
    if not is_user_stream(entry):
        return (FIRST_STAGE,)
    from pipelines.api import JobError, load_job

    try:
        return load_job(entry.job).stage_names
    except JobError as error:
        log.warning("stream %s: %s; only its first stage gets a resizing asset", entry.name, error)
        return (FIRST_STAGE,)


def entry_policy(entry: StreamEntry, default: ElasticityPolicy) -> ElasticityPolicy:
    """The stream's default elasticity policy: the code location's, with the entry's declared options."""
    if not entry.policy:
        return default
    return ElasticityPolicy.model_validate({**default.model_dump(), **entry.policy})


def stream_root(settings: EspSettings, name: str) -> str:
    """The stream's folder under the settings' streams folder (a local path or an object-store URI)."""
    return uris.join(settings.streams_folder, name)


def stream_spec(settings: EspSettings, entry: StreamEntry, **options: object) -> StreamSpec:
    """The entry's StreamSpec: StreamSpec's defaults, then the entry's declared settings, then `options`."""
    return StreamSpec(
        name=entry.name,
        job=entry.job,
        input_topic=str(options.pop("input_topic", None) or entry.input_topic),
        bootstrap_servers=settings.kafka.bootstrap_servers,
        kafka_security=settings.kafka.security,
        root=str(options.pop("root", None) or stream_root(settings, entry.name)),
        **{**entry.settings, **options},
    )
