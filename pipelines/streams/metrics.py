"""Per-batch metrics of a stream, and where they go.

Each micro-batch produces one `BatchMetrics` record (stream totals plus one entry per channel).
The driver publishes it as JSON to the `<stream>.metrics` topic: the sensors of the
orchestration layer read the last few records from there, wherever the stream's driver runs,
and the topic's retention keeps it bounded (`METRICS_TOPIC_CONFIGS`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from elasticity.state import Location
from pipelines.settings import KafkaConnection, kafka_connection
from pipelines.streams.names import FIRST_STAGE

METRICS_TOPIC_CONFIGS = {"retention.ms": str(6 * 3600 * 1000), "cleanup.policy": "delete"}


@dataclass(frozen=True)
class RebuildReport:
    """A channel's working set rebuilt from its durable history in this batch (after a crash, on
    a fresh Python worker, on a rescale receiver): what was read back and how long each part took."""

    snapshot_entries: int
    snapshot_bytes: int
    restore_ms: float
    changelog_entries: int
    fold_ms: float
    fixed_ms: float | None = None
    """The fresh Python worker's start before it read anything (None: the worker was warm)."""

    @classmethod
    def of(cls, timing: Any, fixed_s: float | None = None) -> RebuildReport:
        """From the store's `RestoreTiming`, and the worker's start if it was fresh."""
        return cls(
            snapshot_entries=timing.snapshot_entries,
            snapshot_bytes=timing.snapshot_bytes,
            restore_ms=timing.restore_s * 1000,
            changelog_entries=timing.changelog_entries,
            fold_ms=timing.fold_s * 1000,
            fixed_ms=fixed_s * 1000 if fixed_s is not None else None,
        )


@dataclass
class ChannelMetrics:
    channel: int
    records: int = 0
    keys_in: int = 0
    proc_ms: float = 0.0
    state_keys: int = 0
    state_bytes: int | None = None
    probe_latency_ms: list[float] = field(default_factory=list)
    top_key_records: int = 0  # records of the channel's most frequent key: can a split divide its work?
    open_ms: float = 0.0
    """Time the task spent getting the channel's working set current (a sync, or a rebuild)."""
    apply_ms: float | None = None
    """Time the commit spent applying the batch's changelog to the working set, not counting its
    durable write (None: a replay)."""
    rebuild: RebuildReport | None = None
    """Set when the working set was rebuilt from history in this batch."""
    warmup_ms: float | None = None
    """Set in a fresh Python worker's first task: its one-time start (imports) before anything else."""
    snapshot_rule: str | None = None
    """The snapshot policy's rule after this batch (`elasticity.snapshots`); the driver fills it in."""
    predicted_recovery_s: float | None = None
    """The recovery time the snapshot policy predicts for this channel after its decision."""
    rejected_records: int = 0
    """Rows the channel's operator rejected (`Context.reject`): the stream keeps them in its late table."""
    executor: str | None = None
    """The executor the channel's task ran on (standalone cluster; None elsewhere): where its working set is."""
    output_rows: int = 0
    """Rows the channel's operator emitted in the batch."""


@dataclass(frozen=True)
class SnapshotRecord:
    """A channel snapshot the driver wrote from the durable history."""

    channel: int
    batch_id: int
    entries: int
    bytes: int
    changelogs_folded: int
    write_ms: float
    rule: str


@dataclass
class BatchMetrics:
    stream: str
    batch_id: int
    epoch: int
    channels: int
    wall_time: float
    input_records: int = 0
    rejected_records: int = 0
    late_records: int = 0
    batch_ms: float = 0.0
    records_per_s: float = 0.0
    per_channel: list[ChannelMetrics] = field(default_factory=list)
    rescale: dict[str, Any] | None = None
    phase_ms: dict[str, float] = field(default_factory=dict)
    """Wall time of the batch's parts: rescale, then dead_letters, archive, late and stage,
    which run side by side (so they overlap)."""
    metrics_dropped: int = 0
    """Metrics records of earlier batches that could not be published (a broker outage)."""
    admitted_records: int | None = None
    """Kafka records the batch admitted (from the offsets log; None when not measured)."""
    admission_cap: int | None = None
    """Records the next batch may admit, as admission control decided after this one (None: uncapped)."""
    admission_rule: str | None = None
    """The admission rule that decided (cap, lower, raise, lift, hold, uncapped; None: admission off)."""
    query_restart_ms: float | None = None
    """Wall time of the query restart that set a new cap before this batch (None: no restart)."""
    snapshots: list[SnapshotRecord] = field(default_factory=list)
    """Channel snapshots written since the previous batch's record (off the batches' path)."""
    executors: int | None = None
    """Executors the application had when the batch ended (None: executors do not follow channels)."""
    executors_target: int | None = None
    """Executors asked for the batch's channels (None: executors do not follow channels)."""
    channels_moved: int | None = None
    """Channels whose task ran on another executor than in the previous batch (None: unknown)."""
    moved_open_ms: float | None = None
    """Time those moved channels spent getting their working set current there: the moves' cost."""
    stage: str = FIRST_STAGE
    """The job's elastic stage these figures are of (`pipelines.api.Stage`; the first: `main`)."""
    output_rows: int | None = None
    """Rows the stage's operator emitted in the batch (output / input records: its selectivity)."""
    stage_ms: float | None = None
    """A multi-stage job: the wall time of this stage's own Spark job in the batch (its channels' tasks,
    after the stages before it; None for a one-stage job, whose stage is the batch's `stage` phase)."""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> BatchMetrics:
        """Parse one record; `MalformedMetrics` says what is wrong with one that is not a BatchMetrics."""
        try:
            data = json.loads(raw)
        except (TypeError, ValueError) as error:  # not bytes (a tombstone), not UTF-8, not JSON
            raise MalformedMetrics(f"not JSON: {error}") from None
        if not isinstance(data, dict):
            raise MalformedMetrics(f"a JSON {type(data).__name__}, not an object")
        channels = data.get("per_channel", [])
        if not isinstance(channels, list) or not all(isinstance(c, dict) for c in channels):
            raise MalformedMetrics("per_channel is not a list of objects")
        # Records written by an older esp may carry fields since removed; they are dropped.
        known = {f.name for f in fields(cls)}
        try:
            data["per_channel"] = [_channel_metrics(c) for c in channels]
            data["snapshots"] = [SnapshotRecord(**_known(SnapshotRecord, s)) for s in data.get("snapshots") or []]
            metrics = cls(**{k: v for k, v in data.items() if k in known})
        except TypeError as error:  # a required field missing
            raise MalformedMetrics(str(error)) from None
        metrics._check_types()
        return metrics

    def _check_types(self) -> None:
        """The fields the sensor computes with have the types it computes with."""
        _require(_is_integer, self.batch_id, "batch_id", "an integer")
        _require(_is_integer, self.epoch, "epoch", "an integer")
        _require(_is_integer, self.channels, "channels", "an integer")
        _require(_is_integer, self.input_records, "input_records", "an integer")
        _require(_is_number, self.wall_time, "wall_time", "a finite number")
        _require(_is_number, self.batch_ms, "batch_ms", "a finite number")
        for entry in self.per_channel:
            _require(_is_integer, entry.channel, "per_channel.channel", "an integer")
            _require(_is_integer, entry.records, f"per_channel[{entry.channel}].records", "an integer")
            latencies = entry.probe_latency_ms
            if not isinstance(latencies, list) or not all(map(_is_number, latencies)):
                raise MalformedMetrics(f"per_channel[{entry.channel}].probe_latency_ms is not a list of numbers")

    @property
    def probe_latencies(self) -> list[float]:
        return [lat for c in self.per_channel for lat in c.probe_latency_ms]

    @property
    def rebuilt_channels(self) -> int:
        """Channels whose working set was rebuilt from the durable history in this batch."""
        return sum(1 for c in self.per_channel if c.rebuild is not None)

    @property
    def rebuild_bytes(self) -> int:
        """Snapshot bytes the batch's rebuilds read back: the cost of channels changing place."""
        return sum(c.rebuild.snapshot_bytes for c in self.per_channel if c.rebuild is not None)

    def served_by_executor(self) -> Counter[str]:
        """executor id -> the channels it ran in this batch (channels without a known executor left out)."""
        return Counter(c.executor for c in self.per_channel if c.executor is not None)

    def moved_since(self, previous: BatchMetrics | None) -> list[ChannelMetrics] | None:
        """The channels that ran on another executor than in `previous` (None when either is unknown)."""
        before = {c.channel: c.executor for c in previous.per_channel if c.executor is not None} if previous else {}
        if not before or not self.served_by_executor():
            return None
        return [c for c in self.per_channel if c.channel in before and before[c.channel] != c.executor]


class MalformedMetrics(ValueError):
    """A record on a metrics topic that is not a BatchMetrics; readers skip and count it."""


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(check: Any, value: object, name: str, kind: str) -> None:
    if not check(value):
        raise MalformedMetrics(f"{name} is {value!r:.80}, not {kind}")


def _channel_metrics(data: dict[str, Any]) -> ChannelMetrics:
    known = _known(ChannelMetrics, data)
    if isinstance(known.get("rebuild"), dict):
        known["rebuild"] = RebuildReport(**_known(RebuildReport, known["rebuild"]))
    return ChannelMetrics(**known)


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True)
class RecentMetrics:
    """The last metrics records of a stream (oldest first) and how many malformed ones were skipped."""

    records: list[BatchMetrics]
    skipped: int = 0
    first_problem: str | None = None


def kafka_lag(end_offsets: dict[int, int], consumed: dict[int, int]) -> dict[int, int]:
    """Records not yet consumed per partition: broker end offset minus the query's offset."""
    return {p: max(0, end - consumed.get(p, 0)) for p, end in end_offsets.items()}


def consumed_offsets(progress: dict[str, Any] | None, topic: str) -> dict[int, int]:
    """The end offsets of the last committed micro-batch, from a StreamingQueryProgress dict."""
    if not progress:
        return {}
    for source in progress.get("sources", []):
        end = source.get("endOffset")
        if isinstance(end, str):
            end = json.loads(end)
        if isinstance(end, dict) and topic in end:
            return {int(p): int(o) for p, o in end[topic].items()}
    return {}


def read_recent(
    bootstrap: KafkaConnection | str, topic: str, limit: int = 50, timeout_s: float = 5.0
) -> list[BatchMetrics]:
    """The last `limit` metrics records of a stream (oldest first), malformed ones skipped."""
    return read_recent_counted(bootstrap, topic, limit, timeout_s).records


def read_recent_counted(
    bootstrap: KafkaConnection | str, topic: str, limit: int = 50, timeout_s: float = 5.0
) -> RecentMetrics:
    """The last `limit` records of a metrics topic; a malformed one is skipped and counted, never raised
    (it stays on the topic for its retention, and would otherwise fail every reader until then)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        **kafka_connection(bootstrap).client_kwargs(),
        enable_auto_commit=False,
        consumer_timeout_ms=int(timeout_s * 1000),
    )
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        if not partitions:
            return RecentMetrics(records=[])  # the topic does not exist yet
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        for tp in partitions:
            consumer.seek(tp, max(0, ends[tp] - limit))
        records: list[BatchMetrics] = []
        skipped, first_problem = 0, None
        remaining = sum(min(limit, ends[tp]) for tp in partitions)
        while remaining > 0:
            polled = consumer.poll(timeout_ms=int(timeout_s * 1000))
            if not polled:
                break
            for batch in polled.values():
                for record in batch:
                    try:
                        records.append(BatchMetrics.from_json(record.value))
                    except MalformedMetrics as problem:
                        skipped += 1
                        first_problem = first_problem or f"offset {record.offset}: {problem}"
                remaining -= len(batch)
        recent = sorted(records, key=lambda m: (m.wall_time, m.batch_id))[-limit:]
        return RecentMetrics(recent, skipped, first_problem)
    finally:
        consumer.close()


def checkpoint_offsets(checkpoint_dir: str, topic: str) -> dict[int, int]:
    """End offsets of the last *committed* micro-batch, read from a query's checkpoint folder.

    Lets a process other than the driver (a sensor, a test) compute lag and progress.
    """
    batch_ids = checkpoint_batch_ids(Location.of(checkpoint_dir).child("commits"))
    if not batch_ids:
        return {}
    return planned_offsets(checkpoint_dir, batch_ids[-1], topic) or {}


def planned_offsets(checkpoint_dir: str, batch_id: int, topic: str) -> dict[int, int] | None:
    """End offsets on `topic` that the query's offsets log planned for `batch_id` ({} if the
    batch did not read the topic; None if the log has no such entry: Spark keeps the newest 100)."""
    offsets = Location.of(checkpoint_dir).child("offsets")
    if not offsets.exists(str(batch_id)):
        return None
    # Spark's own file, with no esp checksum: read as stored. "v1", the batch's metadata, then
    # one line per source.
    for line in offsets.read_raw(str(batch_id)).decode().splitlines()[2:]:
        parsed = json.loads(line)
        if isinstance(parsed, dict) and topic in parsed:
            return {int(p): int(o) for p, o in parsed[topic].items()}
    return {}


def planned_batch_timestamp_ms(checkpoint_dir: str, batch_id: int) -> int | None:
    """The processing time Spark recorded for `batch_id` in its offsets log (epoch ms): the same
    on every run of the batch, so a replay sees the time its first run saw (None: no such entry)."""
    offsets = Location.of(checkpoint_dir).child("offsets")
    if not offsets.exists(str(batch_id)):
        return None
    lines = offsets.read_raw(str(batch_id)).decode().splitlines()
    return int(json.loads(lines[1])["batchTimestampMs"]) if len(lines) > 1 else None


def checkpoint_batch_ids(folder: Location) -> list[int]:
    """The batch ids in a checkpoint's `offsets` or `commits` folder, oldest first ([] if none)."""
    return sorted(int(name) for name in folder.names() if name.isdigit())
