"""`esp status`: every stream's state in one table, from the sources the elasticity sensor reads.

`read_status` takes one reading of a stream (its metrics topic and Kafka offsets, through a
`StreamSource`: the real `KafkaStreamSource` or a test's fake), its effective policy and the
sensor's last decision (`decisions.py`), and returns a `StreamStatus`; `driver_of` names the
process that writes the stream (its lease's live holder); `later_stage_layouts` reads a
multi-stage job's other stages' channels; `render_status` draws
the rows as a rich table. The CLI (`orchestration.cli.status`) refreshes it live.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from orchestration.elasticity.collector import NotReady, OffsetSample, StreamSource, collect
from orchestration.elasticity.decisions import DecisionRecord
from orchestration.elasticity.policy import ElasticityPolicy
from pipelines.streams.spec import StreamSpec


@dataclass(frozen=True)
class StageLayout:
    """A later elastic stage of a multi-stage job: its name and committed layout (None: none yet)."""

    stage: str
    channels: int | None
    epoch: int | None


@dataclass(frozen=True)
class StreamStatus:
    """One stream's row; the numbers are None when they could not be read (`problem` says why)."""

    name: str
    slo_ms: float
    channels: int | None = None
    epoch: int | None = None
    input_rps: float | None = None
    processed_rps: float | None = None
    lag_records: float | None = None
    p99_ms: float | None = None
    decision: DecisionRecord | None = None
    problem: str | None = None
    driver: str | None = None
    """Who writes the stream (its lease's live holder: pid and host); None when nobody does."""
    later_stages: tuple[StageLayout, ...] = ()
    """A multi-stage job's later stages, each with its own channels (the row's are the first stage's)."""


def read_status(
    name: str,
    source: StreamSource,
    policy: ElasticityPolicy,
    decision: DecisionRecord | None,
    previous: OffsetSample | None,
    now_s: float,
) -> tuple[StreamStatus, OffsetSample | None]:
    """The stream's status now, and the offsets the next refresh derives the input rate from."""
    base = StreamStatus(name=name, slo_ms=policy.slo_s * 1000, decision=decision)
    try:
        collected = collect(source.read(now_s), previous, policy)
    except NotReady as not_ready:
        return StreamStatus(**{**base.__dict__, "problem": str(not_ready)}), previous
    snapshot = collected.snapshot
    status = StreamStatus(
        **{
            **base.__dict__,
            "channels": snapshot.channels,
            "epoch": collected.epoch,
            "input_rps": snapshot.input_rate_rps,
            "processed_rps": snapshot.total_throughput_rps,
            "lag_records": snapshot.total_lag_records,
            "p99_ms": collected.p99_latency_s * 1000,
        }
    )
    return status, collected.offsets


def driver_of(elastic_root: str) -> str | None:
    """The live holder of the stream's lease as `pid N on HOST` (None: nobody writes it); the
    lease is only read, never taken, so a stream starting meanwhile is not disturbed."""
    from elasticity.lease import live_holder

    try:
        holder = live_holder(elastic_root)
    except OSError as error:  # an object store that does not answer
        return f"unknown ({error})"
    return None if holder is None else f"pid {holder.pid} on {holder.host}"


def later_stage_layouts(spec: StreamSpec, stages: Sequence[str]) -> tuple[StageLayout, ...]:
    """The committed layout of each of `stages` (a multi-stage job's later stages), read from its folder."""
    from pipelines.streams.files import StreamFiles

    layouts = []
    for stage in stages:
        layout = StreamFiles(spec, stage).committed_layout()
        layouts.append(
            StageLayout(stage, None if layout is None else layout.n_channels, None if layout is None else layout.epoch)
        )
    return tuple(layouts)


def _channels(status: StreamStatus) -> str:
    first = "–" if status.channels is None else f"{status.channels} (e{status.epoch})"
    later = [f"{s.stage}: {'–' if s.channels is None else f'{s.channels} (e{s.epoch})'}" for s in status.later_stages]
    return "\n".join([first, *later])


def _number(value: float | None, unit: str = "") -> str:
    return "–" if value is None else f"{value:,.0f}{unit}"


def _latency(status: StreamStatus) -> Text:
    if status.p99_ms is None:
        return Text(f"– / {status.slo_ms:,.0f}")
    style = "bold red" if status.p99_ms > status.slo_ms else "green"
    return Text(f"{status.p99_ms:,.0f} / {status.slo_ms:,.0f}", style=style)


def _decision(status: StreamStatus, now_s: float) -> Text:
    text = Text()
    if status.problem is not None:
        text.append(status.problem, style="yellow")
    decision = status.decision
    if decision is not None:
        if text:
            text.append("\n")
        age = max(0.0, now_s - decision.at)
        head = f"{'RESCALE' if decision.rescale else 'hold'} {decision.rule} {age:.0f}s ago: ".replace("  ", " ")
        text.append(head, style="bold cyan" if decision.rescale else "bold")
        text.append(decision.reason)
    elif status.problem is None:
        text.append("no decision yet (is the elasticity sensor on?)", style="dim")
    return text


def render_status(statuses: Sequence[StreamStatus], now_s: float | None = None) -> Table:
    """The table of `esp status`: one row per stream."""
    now = time.time() if now_s is None else now_s
    table = Table(title=f"esp streams at {time.strftime('%H:%M:%S', time.localtime(now))}", expand=True)
    table.add_column("stream", style="bold")
    table.add_column("driver")
    table.add_column("channels", justify="right")
    table.add_column("in rec/s", justify="right")
    table.add_column("out rec/s", justify="right")
    table.add_column("lag", justify="right")
    table.add_column("p99 / SLO ms", justify="right")
    table.add_column("last decision", ratio=1)
    for status in statuses:
        table.add_row(
            status.name,
            Text(status.driver) if status.driver is not None else Text("none", style="dim"),
            _channels(status),
            _number(status.input_rps),
            _number(status.processed_rps),
            _number(status.lag_records),
            _latency(status),
            _decision(status, now),
        )
    return table
