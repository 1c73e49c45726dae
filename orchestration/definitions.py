"""The esp Dagster code location: every domain's definitions merged, plus shared resources."""

from __future__ import annotations

from dagster import Definitions

from orchestration.elasticity.definitions import defs as elasticity_defs
from orchestration.health.definitions import defs as health_defs
from orchestration.platform.definitions import defs as platform_defs
from orchestration.quality.definitions import defs as data_quality_defs  # quality + backfills
from orchestration.resources import EspSettingsResource, EspSparkResource, KafkaResource
from orchestration.streams.definitions import defs as stream_defs


def shared_resources() -> dict[str, object]:
    settings = EspSettingsResource()
    return {
        "esp_settings": settings,
        "spark": EspSparkResource(settings=settings),
        "kafka": KafkaResource(settings=settings),
    }


defs = Definitions.merge(
    platform_defs,
    stream_defs,
    elasticity_defs,
    data_quality_defs,
    health_defs,
    Definitions(resources=shared_resources()),
)
