"""Hand-written fakes for tests of the elasticity domain: a scripted stream, no Kafka, no Spark.

`FakeStream` produces what `KafkaStreamSource` would read from a real stream: `BatchMetrics`
records (per channel: records and probe latencies) and Kafka offsets, on a clock it advances
itself. Tests script load phases (`run`), stalls (`stall`) and relayouts (`relayout`), then
hand `read()` to `collect`/`decide_tick` or to the sensor as its source.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from orchestration.elasticity.collector import StreamReading
from pipelines.streams.metrics import BatchMetrics, ChannelMetrics


class FakeStream:
    """A scripted stream with a controllable clock (wall seconds)."""

    def __init__(
        self,
        channels: Iterable[int] = (0, 1),
        *,
        partitions: int = 2,
        now_s: float = 1_000_000.0,
        probe_period_s: float = 1.0,
        records_per_offset: float = 1.0,
        reports_admitted: bool = True,
    ) -> None:
        self.channels = tuple(sorted(channels))
        self.epoch = 0
        self.now_s = now_s
        self.probe_period_s = probe_period_s
        self.records_per_offset = records_per_offset
        self.reports_admitted = reports_admitted
        """Whether each batch reports the Kafka records it admitted (as a stream of this version does)."""
        self.metrics: list[BatchMetrics] = []
        self.end = dict.fromkeys(range(partitions), 0)
        self.consumed = dict.fromkeys(range(partitions), 0)
        self.batch_id = 0
        self.committed_epoch = 0
        self.committed_channels: int | None = len(self.channels)

    def _offsets(self, produced_records: float, lag_records: float) -> None:
        per_partition = produced_records / self.records_per_offset / len(self.end)
        for p in self.end:
            self.end[p] += round(per_partition)
            self.consumed[p] = max(0, self.end[p] - round(lag_records / self.records_per_offset / len(self.end)))

    def run(
        self,
        seconds: float,
        rate_rps: float,
        latency_s: float | Mapping[int, float],
        *,
        batch_s: float = 2.0,
        lag_records: float = 0.0,
        silent: Iterable[int] = (),
        shares: Mapping[int, float] | None = None,
        service_ms: float = 0.0,
        top_key_share: float = 0.0,
    ) -> FakeStream:
        """Batches of `batch_s` for `seconds` at `rate_rps`; channels in `silent` return no probes;
        each record costs `service_ms` of a channel's time, its most frequent key is `top_key_share`."""
        quiet = set(silent)
        elapsed = 0.0
        while elapsed < seconds - 1e-9:
            self.now_s += batch_s
            elapsed += batch_s
            per_channel = []
            for c in self.channels:
                share = shares[c] if shares is not None else 1.0 / len(self.channels)
                latency = latency_s[c] if isinstance(latency_s, Mapping) else latency_s
                probes = [] if c in quiet else [latency * 1000.0] * max(1, round(batch_s / self.probe_period_s))
                records = round(rate_rps * share * batch_s)
                per_channel.append(
                    ChannelMetrics(
                        channel=c,
                        records=records,
                        proc_ms=records * service_ms,
                        probe_latency_ms=probes,
                        top_key_records=round(records * top_key_share),
                    )
                )
            records = sum(c.records for c in per_channel)
            self.metrics.append(
                BatchMetrics(
                    stream="fake",
                    batch_id=self.batch_id,
                    epoch=self.epoch,
                    channels=len(self.channels),
                    wall_time=self.now_s,
                    input_records=records,
                    batch_ms=batch_s * 1000.0,
                    per_channel=per_channel,
                    admitted_records=round(records / self.records_per_offset) if self.reports_admitted else None,
                )
            )
            self.batch_id += 1
            self._offsets(rate_rps * batch_s, lag_records)
        return self

    def stall(self, seconds: float, rate_rps: float) -> FakeStream:
        """Time passes and input arrives, but no batch finishes (a batch stuck or very long)."""
        self.now_s += seconds
        for p in self.end:
            self.end[p] += round(rate_rps * seconds / self.records_per_offset / len(self.end))
        return self

    def relayout(self, channels: Iterable[int]) -> FakeStream:
        """The stream committed a new layout: next batches report these channels at epoch + 1."""
        self.channels = tuple(sorted(channels))
        self.epoch += 1
        self.committed_epoch = self.epoch
        self.committed_channels = len(self.channels)
        return self

    def commit_layout(self, channels: Iterable[int] | None = None) -> FakeStream:
        """A rescale committed in the registry, but no batch of the new layout has finished yet;
        the registry names its `channels` (None: a reading without the committed channel count)."""
        self.committed_epoch = self.epoch + 1
        self.committed_channels = None if channels is None else len(tuple(channels))
        return self

    def read(self, now_s: float | None = None) -> StreamReading:
        return StreamReading(
            now_s=self.now_s if now_s is None else now_s,
            metrics=list(self.metrics[-120:]),
            end_offsets=dict(self.end),
            consumed_offsets=dict(self.consumed),
            probe_period_s=self.probe_period_s,
            committed_epoch=self.committed_epoch,
            committed_channels=self.committed_channels,
        )


class FakeSource:
    """A `StreamSource` over a `FakeStream` (ignores the caller's clock: the fake's is the truth)."""

    def __init__(self, stream: FakeStream) -> None:
        self.stream = stream

    def read(self, now_s: float) -> StreamReading:
        return self.stream.read()


def as_first_of_two_stages(stream: FakeStream, busy_share: float) -> FakeStream:
    """Make the fake's batches those of a first stage that passes every row on (selectivity 1) and is
    busy `busy_share` of each batch's time."""
    for record in stream.metrics:
        record.output_rows = record.input_records
        record.stage_ms = busy_share * record.batch_ms
    return stream


def downstream_batches(stream: FakeStream, stage: str, rows_per_s_per_channel: float) -> list[BatchMetrics]:
    """A second stage's batches, one per batch of `stream`: every row the first stage passed on, on
    one channel that gets through `rows_per_s_per_channel`."""
    return [
        BatchMetrics(
            stream=m.stream,
            batch_id=m.batch_id,
            epoch=0,
            channels=1,
            wall_time=m.wall_time,
            input_records=m.input_records,
            batch_ms=m.batch_ms,
            stage=stage,
            output_rows=m.input_records,
            stage_ms=1000.0 * m.input_records / rows_per_s_per_channel,
        )
        for m in stream.metrics
    ]
