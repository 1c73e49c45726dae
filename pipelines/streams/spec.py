"""The typed description of one elastic stream, and the folders and topics derived from it."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, field_validator

from elasticity.admission import AdmissionOptions
from elasticity.lease import DEFAULT_TTL_S
from elasticity.snapshots.planner import SnapshotOptions
from elasticity.state import uris
from elasticity.state.kinds import StoreKind, describe_store_kinds
from pipelines.settings import KafkaClientSecurity, KafkaConnection
from pipelines.streams import names

BUILT_IN_JOBS = frozenset({"wordcount", "adclicks"})
JOB_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
"""A user job's factory: `package.module:function` (`pipelines.api.load_job`)."""


class StreamSpec(BaseModel):
    """One elastic stream job; every option has a default and says what it is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        "wordcount", pattern=r"^[a-z][a-z0-9_-]*$", description="Stream name; prefixes its topics and folders."
    )
    job: str = Field(
        "wordcount",
        description="Which job the stream runs: a built-in one (wordcount, adclicks) or a user job's factory as "
        "'module:function' (see pipelines.api).",
    )
    input_topic: str = Field("words", description="Kafka topic the stream reads.")
    input_partitions: int | None = Field(
        None, ge=1, description="Create the input topic with this many partitions when missing (None: it must exist)."
    )
    bootstrap_servers: str = Field("127.0.0.1:9092", description="Kafka bootstrap address.")
    kafka_security: KafkaClientSecurity = Field(
        default_factory=KafkaClientSecurity, description="How the stream's Kafka clients authenticate (settings')."
    )
    root: str = Field(
        ".esp/run/streams/wordcount",
        description="Folder for checkpoint, state, tables, control: a path (made absolute when the spec is built) "
        "or a file://, s3:// or s3a:// URI.",
        validate_default=True,
    )
    lease_ttl_s: float = Field(
        DEFAULT_TTL_S,
        gt=1,
        description="Root on an object store: how long a dead driver's lease keeps a successor on another machine "
        "waiting (renewed every third of it; a driver that died on the successor's machine is replaced at once).",
    )
    channels: int = Field(4, ge=1, le=1024, description="Channels of the elastic stage when the stream first starts.")
    trigger_seconds: float = Field(1.0, gt=0, description="Micro-batch trigger interval.")
    max_offsets_per_trigger: int | None = Field(
        None, ge=1, description="Cap on records per micro-batch (None: all available)."
    )
    max_records_per_channel: int | None = Field(
        None,
        ge=1,
        description="Cap on records per micro-batch per channel of the first elastic stage: a rescale lands at a "
        "batch boundary, so this bounds its wait for the batch in flight; the query restarts (~0.1 s) when a "
        "rescale changes the cap (None: no per-channel cap).",
    )
    admission: AdmissionOptions | None = Field(
        None,
        description="Admission control (seed 004's high/low watermarks on the batch duration): cap the records a "
        "batch admits while batches run long, lift the cap once they run short (None: off).",
    )
    store_kind: StoreKind = Field(
        "rocks",
        description=f"Channel state store; every kind keeps the same durable history. {describe_store_kinds()}.",
    )
    snapshots: SnapshotOptions = Field(
        default_factory=SnapshotOptions,
        description="When channels snapshot their state (seed 003): adaptive under a recovery-time bound by "
        "default, or a fixed period; the driver writes them from the durable history, off the batches' path.",
    )
    results_to_kafka: bool = Field(True, description="Also publish result updates to the `<name>.results` topic.")
    archive_input: bool = Field(
        True, description="Archive every accepted input record to the bronze Parquet table (backfills replay it)."
    )
    routing_tasks: int | None = Field(
        None,
        ge=1,
        description="Tasks that route a batch's pre-aggregated deltas to the channels (None: Spark's default "
        "parallelism, i.e. the cores; more tasks than cores only add per-task overhead to every batch).",
    )
    compact_every_batches: int = Field(
        100,
        ge=0,
        description="Every N batches, fold the committed batches' results and late folders into one folder per "
        "bronze day (bounds the folders; the folds run in the background, the swap at a batch boundary shows in "
        "the batch's phase_ms 'compact'). 0: never.",
    )
    bronze_retention_days: float = Field(
        7,
        gt=0,
        description="Days of the bronze archive kept for backfills (fractions allowed); what it took in "
        "earlier is deleted at each compaction (whole days before the cutoff's date, then batch by batch).",
    )
    results_topic_retention_hours: float = Field(
        168, gt=0, description="Retention of the `<name>.results` topic, set when the stream creates it."
    )
    dead_letter_retention_hours: float = Field(
        168, gt=0, description="Retention of the `<name>.dlq` dead-letter topic, set when the stream creates it."
    )
    window_seconds: int = Field(10, ge=1, description="adclicks: tumbling event-time window length.")
    watermark_seconds: int = Field(30, ge=0, description="adclicks: allowed lateness behind the max event time seen.")
    max_event_time_ahead_s: int = Field(
        300,
        ge=0,
        le=366 * 86_400,
        description="adclicks: how far an event's time may lie ahead of its record's Kafka timestamp; a later one "
        "is dead-lettered (so one event from the far future cannot move the watermark past every later event).",
    )
    max_event_time_behind_s: int = Field(
        7 * 86_400,
        ge=0,
        description="adclicks: how far an event's time may lie behind its record's Kafka timestamp; an older one "
        "is dead-lettered (raise it to replay older history; anything closer is counted, or counted late).",
    )
    probe_period_s: float = Field(1.0, gt=0, description="eSault PROBE_PERIOD: how often probes are sent per channel.")
    service_ms_per_record: float = Field(
        0.0,
        ge=0,
        description="Simulated service time of the keyed stage per record (ms), like one external call per "
        "record: the channel task sleeps for it, so the stage is I/O-bound and channels add capacity beyond the cores "
        "(benchmarks and elasticity tests; run Spark with at least as many task slots as channels). 0: off.",
    )

    stage_service_ms_per_record: dict[str, NonNegativeFloat] = Field(
        default_factory=dict,
        description="Per elastic stage (by name: 'main' is the first), a `service_ms_per_record` of its own: "
        "makes one stage of a multi-stage job the bottleneck (benchmarks). Stages not named use the stream's.",
    )

    @field_validator("job")
    @classmethod
    def _known_job(cls, job: str) -> str:
        if job not in BUILT_IN_JOBS and not JOB_REFERENCE.match(job):
            raise ValueError(f"job {job!r} is neither a built-in job {sorted(BUILT_IN_JOBS)} nor a 'module:function'")
        return job

    @field_validator("root")
    @classmethod
    def _one_spelling(cls, root: str) -> str:
        # Once, where the spec is built: a restart from another working directory, or a `file://`
        # spelling of the same folder, finds the same checkpoint and state.
        return uris.canonical(root)

    def service_ms_per_record_of(self, stage: str) -> float:
        """The simulated service time per record of elastic stage `stage`."""
        return self.stage_service_ms_per_record.get(stage, self.service_ms_per_record)

    @property
    def kafka(self) -> KafkaConnection:
        """The address and security every Kafka client of the stream uses."""
        return KafkaConnection(self.bootstrap_servers, self.kafka_security)

    @property
    def folder(self) -> str:
        """The root: an absolute local path or an object-store URI (never a `pathlib.Path`)."""
        return self.root

    @property
    def checkpoint(self) -> str:
        return names.checkpoint_path(self.folder)

    @property
    def elastic_root(self) -> str:
        """Layout registry, channel state histories, migration areas."""
        return names.elastic_path(self.folder)

    @property
    def local_state(self) -> str:
        return names.local_state_path(self.folder)

    @property
    def results_table(self) -> str:
        return names.results_table_path(self.folder)

    @property
    def rejected_table(self) -> str:
        """Rows the job's operator rejected (`Context.reject`), per batch, with the reason."""
        return names.rejected_table_path(self.folder)

    @property
    def late_table(self) -> str:
        """adclicks: window counts that arrived after their window closed, per batch."""
        return names.late_table_path(self.folder)

    @property
    def bronze_table(self) -> str:
        return names.bronze_table_path(self.folder)

    @property
    def control_dir(self) -> str:
        return names.control_path(self.folder)

    @property
    def plots_dir(self) -> str:
        """The stream's plots (rescale share plots, the dashboard), in its control folder."""
        return uris.join(self.control_dir, "plots")

    @property
    def results_topic(self) -> str:
        return names.results_topic(self.name)

    @property
    def dead_letter_topic(self) -> str:
        return names.dead_letter_topic(self.name)

    @property
    def metrics_topic(self) -> str:
        return names.metrics_topic(self.name)
