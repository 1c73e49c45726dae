"""The streams esp ships, and how a Dagster run turns one into a StreamSpec."""

from dataclasses import dataclass
from pathlib import Path

from pipelines.settings import EspSettings
from pipelines.streams.spec import StreamSpec


@dataclass(frozen=True)
class StreamEntry:
    name: str
    job: str
    input_topic: str
    load_kind: str


STREAMS: tuple[StreamEntry, ...] = (
    StreamEntry(name="wordcount", job="wordcount", input_topic="words", load_kind="words"),
    StreamEntry(name="adclicks", job="adclicks", input_topic="ads", load_kind="ads"),
)


def stream_root(settings: EspSettings, name: str) -> Path:
    return settings.run_dir / "streams" / name


def stream_spec(settings: EspSettings, entry: StreamEntry, **options: object) -> StreamSpec:
    return StreamSpec(
        name=entry.name,
        job=entry.job,
        input_topic=str(options.pop("input_topic", None) or entry.input_topic),
        bootstrap_servers=settings.kafka.bootstrap_servers,
        kafka_security=settings.kafka.security,
        root=str(stream_root(settings, entry.name)),
        **options,
    )
