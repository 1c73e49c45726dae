"""Definitions of the streams domain, one asset + job + stop job + supervisor per catalogued stream
(built in, or declared in the stream catalog: `orchestration.streams.catalog`)."""

from dagster import Definitions, define_asset_job

from orchestration.names import STREAM_TAG, stream_job_name
from orchestration.streams.assets import make_stream_asset
from orchestration.streams.catalog import catalog_streams
from orchestration.streams.load_job import load_generator_job
from orchestration.streams.stop import make_stop_job
from orchestration.streams.supervisor import make_supervisor


def _stream_definitions() -> Definitions:
    assets, jobs, sensors = [], [], []
    for entry in catalog_streams():
        stream_asset = make_stream_asset(entry)
        stream_job = define_asset_job(
            stream_job_name(entry.name), selection=[stream_asset], tags={STREAM_TAG: entry.name}
        )
        assets.append(stream_asset)
        jobs += [stream_job, make_stop_job(entry)]
        sensors.append(make_supervisor(entry, stream_job.name))
    return Definitions(assets=assets, jobs=[*jobs, load_generator_job], sensors=sensors)


defs = _stream_definitions()
