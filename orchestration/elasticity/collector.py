"""The real collector: a stream's recent `BatchMetrics` and Kafka offsets -> the controller's `MetricsSnapshot`.

`collect(reading, previous, policy)` is pure: a `StreamReading` (the last metrics records of
`<stream>.metrics`, the input topic's broker end offsets and the end offsets of the query's
last committed batch, all taken at one wall-clock moment) plus the previous tick's
`OffsetSample` (kept in the sensor cursor) give one sampling period's snapshot:

- channels: those of the newest batch's layout epoch; the controller indexes channels
  0..N-1, the layout may have sparse ids (merges leave gaps). `ChannelMap` maps the
  controller's index i <-> channel id explicitly: i is the id's rank, which is also the
  Spark partition the stage runs it on (`Layout.partition_of`).
- probe latency: the slowest probe of the channel that came back in the period, or, if it is
  larger, the age of the oldest probe still out (sent one probe period after the newest
  probe that came back): a stream stuck in a long batch returns no probes at all, and that
  is exactly when latency matters. A probe out longer than `probe_timeout_s` is a timeout.
- throughput: records the channel processed in the batches that ended in the period, over
  the time those batches spanned (trigger gaps included); the last batch if none ended.
- batch cycle: the mean time from one batch's end to the next's over the period, or the age
  of the newest batch if that is longer (a batch still running is in flight too).
- input rate and lag: from Kafka offsets, converted to stage records with the observed ratio
  of stage records (words) per Kafka record (line), so that rate, lag and per-channel
  capacity share one unit.
- awaited layout: a rescale committed but no batch of its layout has finished yet; the snapshot
  is then the layout before it and names the committed one (`MetricsSnapshot.awaited`), which
  the controller judges by nothing but its channels' busy-time ceiling against the input.

`KafkaStreamSource` reads a real stream; tests hand `collect` readings built by hand.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from elasticity.control import CommittedLayout, MetricsSnapshot
from orchestration.elasticity.policy import ElasticityPolicy
from pipelines.settings import KafkaConnection, kafka_connection
from pipelines.streams.metrics import BatchMetrics


class NotReady(Exception):
    """There is nothing to decide on yet; the message says why (it becomes the SkipReason)."""


@dataclass(frozen=True)
class ChannelMap:
    """The controller's channel index i <-> the layout's channel id (ascending ids, i = rank)."""

    channel_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        if list(self.channel_ids) != sorted(set(self.channel_ids)):
            raise ValueError(f"channel ids must be unique and ascending, got {self.channel_ids}")

    @property
    def size(self) -> int:
        return len(self.channel_ids)

    def channel_at(self, index: int) -> int:
        """The layout's channel id of the controller's index (e.g. a decision's `channel`)."""
        return self.channel_ids[index]

    def index_of(self, channel: int) -> int:
        try:
            return self.channel_ids.index(channel)
        except ValueError:
            raise KeyError(f"channel {channel} is not in {list(self.channel_ids)}") from None


@dataclass(frozen=True)
class OffsetSample:
    """Kafka offsets at one tick; the next tick derives input rate and records-per-offset from it."""

    time_s: float
    end: dict[int, int]
    consumed: dict[int, int]
    records_per_offset: float = 1.0
    ratio_offsets: float = 0.0
    """Consumed offsets the ratio stands for (0: never measured): the weight of its evidence."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "time_s": self.time_s,
            "end": {str(p): o for p, o in self.end.items()},
            "consumed": {str(p): o for p, o in self.consumed.items()},
            "records_per_offset": self.records_per_offset,
            "ratio_offsets": self.ratio_offsets,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OffsetSample:
        return cls(
            time_s=float(data["time_s"]),
            end={int(p): int(o) for p, o in data["end"].items()},
            consumed={int(p): int(o) for p, o in data["consumed"].items()},
            records_per_offset=float(data.get("records_per_offset", 1.0)),
            ratio_offsets=float(data.get("ratio_offsets", 0.0)),
        )


@dataclass(frozen=True)
class RecentArrivals:
    """Per partition, the first offset produced in the last `window_s` seconds (by record timestamp):
    end offset minus it is what arrived in that window, a fresher rate than the sampling period's."""

    window_s: float
    start_offsets: dict[int, int]

    def offsets_per_second(self, end_offsets: dict[int, int]) -> float:
        arrived = sum(max(0, end - self.start_offsets.get(p, end)) for p, end in end_offsets.items())
        return arrived / self.window_s


@dataclass(frozen=True)
class StreamReading:
    """Everything read from a stream at one moment (wall-clock seconds)."""

    now_s: float
    metrics: Sequence[BatchMetrics]
    end_offsets: dict[int, int]
    consumed_offsets: dict[int, int]
    probe_period_s: float = 1.0
    committed_epoch: int | None = None  # the layout registry's committed epoch, when readable
    committed_channels: int | None = None  # its channel count (None: not read; such a tick waits for its first batch)
    skipped_metrics: int = 0  # malformed records on the metrics topic, left out of `metrics`
    skipped_problem: str | None = None  # what was wrong with the first of them
    arrivals: RecentArrivals | None = None  # the input topic's last few seconds, when asked for

    def skipped_note(self) -> str | None:
        """One line for the tick's reason and log when malformed metrics records were skipped."""
        if not self.skipped_metrics:
            return None
        return f"skipped {self.skipped_metrics} malformed metrics record(s) (first: {self.skipped_problem})"


@dataclass(frozen=True)
class Collected:
    """One tick's snapshot plus what the sensor needs to explain itself and realize a decision."""

    snapshot: MetricsSnapshot
    channels: ChannelMap
    offsets: OffsetSample
    batches_in_period: int
    notes: dict[str, float] = field(default_factory=dict)

    @property
    def recent_input_rate_rps(self) -> float | None:
        """Stage records/s that arrived over the reading's recent window (None: not read)."""
        return self.snapshot.recent_input_rate_rps

    @property
    def epoch(self) -> int:
        return self.snapshot.layout_epoch

    @property
    def p99_latency_s(self) -> float:
        return float(np.percentile(self.snapshot.probe_latency_s, 99))


class StreamSource(Protocol):
    def read(self, now_s: float) -> StreamReading:
        """The stream's recent metrics and offsets, now."""
        ...


def _batch_start(batches: Sequence[BatchMetrics], index: int) -> float:
    """When batch `index` began to count: the end of the batch before it (so trigger gaps count)."""
    if index > 0:
        return batches[index - 1].wall_time
    first = batches[index]
    return first.wall_time - first.batch_ms / 1000.0


def _batch_cycle(epoch_batches: Sequence[BatchMetrics], first: int, now_s: float) -> float | None:
    """Seconds per micro-batch over epoch_batches[first:] (trigger gaps included), at least the
    age of the newest batch; None with no batch before the period's first to measure from."""
    start = max(first, 1)
    if start >= len(epoch_batches):
        return None
    span = epoch_batches[-1].wall_time - epoch_batches[start - 1].wall_time
    return max(span / (len(epoch_batches) - start), now_s - epoch_batches[-1].wall_time)


def _throughput(epoch_batches: Sequence[BatchMetrics], first: int, channels: ChannelMap) -> np.ndarray:
    """Records/s per channel over epoch_batches[first:]."""
    basis = epoch_batches[first:]
    span = max(1e-3, basis[-1].wall_time - _batch_start(epoch_batches, first))
    records = np.zeros(channels.size)
    for batch in basis:
        for entry in batch.per_channel:
            if entry.channel in channels.channel_ids:
                records[channels.index_of(entry.channel)] += entry.records
    return records / span


def _work(epoch_batches: Sequence[BatchMetrics], first: int, channels: ChannelMap) -> tuple[np.ndarray, np.ndarray]:
    """Per channel over epoch_batches[first:]: (share of the time it spent processing, share of its
    records carried by its most frequent key of each batch)."""
    basis = epoch_batches[first:]
    span = max(1e-3, basis[-1].wall_time - _batch_start(epoch_batches, first))
    busy_ms, top, records = np.zeros(channels.size), np.zeros(channels.size), np.zeros(channels.size)
    for batch in basis:
        for entry in batch.per_channel:
            if entry.channel in channels.channel_ids:
                i = channels.index_of(entry.channel)
                busy_ms[i] += entry.proc_ms
                top[i] += entry.top_key_records
                records[i] += entry.records
    top_share = np.divide(top, records, out=np.zeros(channels.size), where=records > 0)
    return np.minimum(1.0, busy_ms / 1000.0 / span), top_share


def _latency(
    epoch_batches: Sequence[BatchMetrics], first: int, channels: ChannelMap, now_s: float, probe_period_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per channel: (probe latency estimate in s, age of its oldest outstanding probe in s)."""
    returned = np.zeros(channels.size)
    last_sent = np.full(channels.size, -np.inf)
    for position, batch in enumerate(epoch_batches):
        for entry in batch.per_channel:
            if entry.channel not in channels.channel_ids or not entry.probe_latency_ms:
                continue
            i = channels.index_of(entry.channel)
            slowest = max(entry.probe_latency_ms) / 1000.0
            newest_sent = batch.wall_time - min(entry.probe_latency_ms) / 1000.0
            last_sent[i] = max(last_sent[i], newest_sent)
            if position >= first:
                returned[i] = max(returned[i], slowest)
    # A channel with no probe back in this epoch yet is owed probes since the epoch began.
    epoch_start = _batch_start(epoch_batches, 0)
    reference = np.where(np.isfinite(last_sent), last_sent + probe_period_s, epoch_start)
    outstanding = np.maximum(0.0, now_s - reference)
    return np.maximum(returned, outstanding), outstanding


RATIO_MEMORY_PERIODS = 4.0
"""The records-per-offset ratio keeps earlier evidence worth at most this many periods' offsets."""


def _offsets(reading: StreamReading, previous: OffsetSample | None, processed_rps: float) -> tuple[OffsetSample, float]:
    """This tick's offset sample and the input rate in stage records/s.

    Records per offset (e.g. words per line) is processed records over Kafka records, pooled with
    the earlier periods' (up to RATIO_MEMORY_PERIODS of them). Both come from the batches that ended
    in the period and report what they admitted (`_records_and_offsets`), so they always describe
    the same batches: the committed offsets' advance and the reported batches' records need not (a
    batch's metrics are published before its commit), and a live tick once read 1.55 times the ratio
    that way where every batch's own pair was 0.99."""
    ratio = previous.records_per_offset if previous else 1.0
    weight = previous.ratio_offsets if previous else 0.0
    rate_offsets = None
    if previous is not None and reading.now_s > previous.time_s:
        dt = reading.now_s - previous.time_s
        processed, consumed = _records_and_offsets(reading, previous)
        if consumed > 0 and processed > 0:
            kept = min(weight, RATIO_MEMORY_PERIODS * consumed)
            ratio = (ratio * kept + processed) / (kept + consumed)
            weight = kept + consumed
        produced = sum(o - previous.end.get(p, o) for p, o in reading.end_offsets.items())
        rate_offsets = max(0, produced) / dt
    sample = OffsetSample(reading.now_s, dict(reading.end_offsets), dict(reading.consumed_offsets), ratio, weight)
    # First tick: no earlier offsets, the processed rate is the best estimate of the input.
    return sample, (rate_offsets * ratio if rate_offsets is not None else processed_rps)


def _records_and_offsets(reading: StreamReading, previous: OffsetSample) -> tuple[int, int]:
    """(stage records, Kafka records) of the period: of the batches that ended in it and report
    the Kafka records they admitted; else (a stream that does not report them) its batches'
    records and the committed offsets' advance."""
    ended = [m for m in reading.metrics if previous.time_s < m.wall_time <= reading.now_s]
    measured = [m for m in ended if m.admitted_records is not None]
    if measured:
        return sum(m.input_records for m in measured), sum(m.admitted_records or 0 for m in measured)
    consumed = sum(o - previous.consumed.get(p, o) for p, o in reading.consumed_offsets.items())
    return sum(m.input_records for m in ended), consumed


def waiting_for_layout(committed_epoch: int, newest_epoch: int) -> str:
    """Why a tick decides nothing while a committed layout's first batch has not reported."""
    return f"waiting for the first batch of layout epoch {committed_epoch} (newest is epoch {newest_epoch})"


def _awaited_layout(reading: StreamReading, newest: BatchMetrics) -> CommittedLayout | None:
    """The layout a committed rescale made when no batch of it has finished yet (the snapshot is then
    the layout before it: `MetricsSnapshot.awaited`), else None."""
    if reading.committed_epoch is None or newest.epoch >= reading.committed_epoch:
        return None
    if reading.committed_channels is None:
        # Without its channel count the controller could only judge the old layout's metrics,
        # which would rescale twice for one overload.
        raise NotReady(waiting_for_layout(reading.committed_epoch, newest.epoch))
    return CommittedLayout(reading.committed_epoch, reading.committed_channels)


def collect(reading: StreamReading, previous: OffsetSample | None, policy: ElasticityPolicy) -> Collected:
    """One sampling period's snapshot of the stream (see the module docstring)."""
    metrics = sorted(reading.metrics, key=lambda m: (m.wall_time, m.batch_id))
    if not metrics:
        raise NotReady("no metrics yet: the stream has not finished a micro-batch (is it running?)")
    newest = metrics[-1]
    awaited = _awaited_layout(reading, newest)
    epoch_batches = [m for m in metrics if m.epoch == newest.epoch]
    channels = ChannelMap(tuple(sorted(c.channel for c in newest.per_channel)))
    if channels.size == 0:
        raise NotReady(f"the newest batch {newest.batch_id} reports no channels")

    period_start = reading.now_s - policy.sample_period_s
    if previous is not None:
        # Since the previous tick, but never more than a few periods (a paused sensor).
        period_start = max(previous.time_s, reading.now_s - 3 * policy.sample_period_s)
    in_period = [i for i, m in enumerate(epoch_batches) if m.wall_time > period_start]
    first = in_period[0] if in_period else len(epoch_batches) - 1

    throughput = _throughput(epoch_batches, first, channels)
    busy, top_key = _work(epoch_batches, first, channels)
    latency, outstanding = _latency(epoch_batches, first, channels, reading.now_s, reading.probe_period_s)
    offsets, input_rate = _offsets(reading, previous, float(throughput.sum()))
    partitions = sorted(reading.end_offsets)
    lag = [
        max(0, reading.end_offsets[p] - reading.consumed_offsets.get(p, 0)) * offsets.records_per_offset
        for p in partitions
    ]
    recent = None
    if reading.arrivals is not None:
        recent = reading.arrivals.offsets_per_second(reading.end_offsets) * offsets.records_per_offset
    snapshot = MetricsSnapshot.build(
        time_s=reading.now_s,
        probe_latency_s=latency,
        probe_timed_out=outstanding > policy.probe_timeout_s,
        throughput_rps=throughput,
        input_rate_rps=input_rate,
        lag_records=lag or [0.0],
        layout_epoch=newest.epoch,
        busy_share=busy,
        top_key_share=top_key,
        batch_cycle_s=_batch_cycle(epoch_batches, first, reading.now_s),
        awaited=awaited,
        recent_input_rate_rps=recent,
    )
    notes = {
        "newest_batch_id": float(newest.batch_id),
        "newest_batch_age_s": round(reading.now_s - newest.wall_time, 3),
        "records_per_offset": round(offsets.records_per_offset, 4),
        "skipped_metrics": float(reading.skipped_metrics),
    }
    return Collected(snapshot, channels, offsets, len(in_period), notes)


class KafkaStreamSource:
    """Reads a real stream: its metrics topic, its input topic's end offsets, its checkpoint."""

    def __init__(self, spec: Any, limit: int = 120, arrival_window_s: float = 0.0) -> None:
        self.spec = spec
        self.limit = limit
        self.arrival_window_s = arrival_window_s
        """> 0: also read which offsets arrived in the last this many seconds (`RecentArrivals`)."""

    @classmethod
    def of_policy(cls, spec: Any, policy: ElasticityPolicy) -> KafkaStreamSource:
        """The source a one-stage stream's sensor reads, as its policy asks."""
        return cls(spec, policy.metrics_limit, policy.arrival_window_s)

    def read(self, now_s: float) -> StreamReading:
        from pipelines.streams.files import StreamFiles
        from pipelines.streams.metrics import checkpoint_offsets, read_recent_counted

        committed = StreamFiles(self.spec).committed_layout()
        recent = read_recent_counted(self.spec.kafka, self.spec.metrics_topic, limit=self.limit)
        # The window ends when the end offsets are read, not at `now_s`: the metrics read and the
        # consumer's connection come between, ~0.25 s on the elasticity bench, which counted 2.75 s of
        # input as 2.5 (865-912 rec/s at a steady 800).
        window_s = self.arrival_window_s if self.arrival_window_s > 0 else None
        ends, starts = read_input_offsets(self.spec.kafka, self.spec.input_topic, window_s=window_s)
        return StreamReading(
            now_s=now_s,
            metrics=recent.records,
            skipped_metrics=recent.skipped,
            skipped_problem=recent.first_problem,
            end_offsets=ends,
            consumed_offsets=checkpoint_offsets(self.spec.checkpoint, self.spec.input_topic),
            probe_period_s=self.spec.probe_period_s,
            committed_epoch=None if committed is None else committed.epoch,
            committed_channels=None if committed is None else len(committed.channels),
            arrivals=None if starts is None else RecentArrivals(self.arrival_window_s, starts),
        )


def read_input_offsets(
    bootstrap: KafkaConnection | str, topic: str, since_ms: int | None = None, window_s: float | None = None
) -> tuple[dict[int, int], dict[int, int] | None]:
    """One consumer's look at a topic: the broker end offset per partition and, with `since_ms`, per
    partition the first offset whose record timestamp is at or after it (the end offset when
    nothing was produced since); with `window_s` instead, since that many seconds before the end
    offsets were read; ({}, {} or None) if the topic does not exist."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**kafka_connection(bootstrap).client_kwargs(), enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        if not partitions:
            return {}, (None if since_ms is None and window_s is None else {})
        ends = {tp.partition: int(o) for tp, o in consumer.end_offsets(partitions).items()}
        if window_s is not None:
            since_ms = int((time.time() - window_s) * 1000)
        if since_ms is None:
            return ends, None
        found = consumer.offsets_for_times({tp: since_ms for tp in partitions})
        return ends, {
            tp.partition: int(at.offset) if at is not None else ends[tp.partition] for tp, at in found.items()
        }
    finally:
        consumer.close()


def input_offsets_at(bootstrap: KafkaConnection | str, topic: str, since_ms: int) -> dict[int, int]:
    """Per partition, the first offset whose record timestamp is at or after `since_ms` (the end
    offset when nothing was produced since; {} if the topic does not exist)."""
    return read_input_offsets(bootstrap, topic, since_ms)[1] or {}


def input_end_offsets(bootstrap: KafkaConnection | str, topic: str) -> dict[int, int]:
    """Broker end offset per partition of a topic ({} if the topic does not exist)."""
    return read_input_offsets(bootstrap, topic)[0]
