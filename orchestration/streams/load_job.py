"""A job that runs the load generator with a chosen profile (eSault trace, square, sine, …)."""

from typing import Literal

from dagster import Config, OpExecutionContext, job, op
from pydantic import Field

from orchestration.names import KIND_TAG, LOAD_GENERATOR_JOB
from orchestration.resources import KafkaResource


class LoadRunConfig(Config):
    """The load to produce; the full option set is pipelines.load.LoadSpec."""

    profile: Literal["constant", "step", "square", "sine", "esault"] = Field("esault", description="Rate shape.")
    peak_rate: float = Field(2000.0, gt=0, description="Highest rate, records/s.")
    duration_s: float | None = Field(None, description="Run length; default the profile's own.")
    speed: float = Field(1.0, gt=0, description="Time compression of the profile.")
    kind: Literal["words", "ads"] = Field("words", description="Word-count lines or ad events.")
    topic: str = Field("words", description="Target topic (must exist).")
    distribution: Literal["uniform", "zipf"] = Field("zipf", description="Key distribution.")
    zipf_s: float = Field(1.1, gt=0, description="Zipf exponent.")
    processes: int = Field(1, ge=0, description="Producer processes (0: as many as needed).")


@op(description="Produce the configured load to Kafka and report sent vs target.")
def generate_load(context: OpExecutionContext, config: LoadRunConfig, kafka: KafkaResource) -> dict:
    from pipelines.load import LoadSpec, run_load

    spec = LoadSpec(**config.model_dump())
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
