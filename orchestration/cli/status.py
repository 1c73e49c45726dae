"""`esp status`: a live terminal view of every stream (channels, rates, lag, p99, last decision)."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import typer

from orchestration.cli.common import ConfigOption, console, friendly_errors

if TYPE_CHECKING:
    from orchestration.elasticity.collector import OffsetSample
    from orchestration.elasticity.status import StreamStatus


def _read_all(settings, names: list[str] | None, previous: dict[str, OffsetSample | None]) -> list[StreamStatus]:
    from kafka.errors import KafkaError

    from orchestration.elasticity.collector import KafkaStreamSource
    from orchestration.elasticity.decisions import read_decision
    from orchestration.elasticity.policy import ElasticityPolicy, PolicyFileError, load_policy
    from orchestration.elasticity.sensor import DEFAULT_INTERVAL_S
    from orchestration.elasticity.status import StreamStatus, driver_of, later_stage_layouts, read_status
    from orchestration.streams.catalog import catalog_streams, entry_policy, entry_stages, stream_spec

    default = ElasticityPolicy(sample_period_s=float(DEFAULT_INTERVAL_S))
    statuses = []
    for entry in catalog_streams():
        if names and entry.name not in names:
            continue
        spec = stream_spec(settings, entry)
        decision = read_decision(spec.control_dir)
        stream_default = entry_policy(entry, default)
        try:
            policy = load_policy(spec.control_dir, stream_default)
        except PolicyFileError as error:
            slo_ms = stream_default.slo_s * 1000
            statuses.append(StreamStatus(entry.name, slo_ms, decision=decision, problem=str(error)))
            continue
        source = KafkaStreamSource.of_policy(spec, policy)
        try:
            status, previous[entry.name] = read_status(
                entry.name, source, policy, decision, previous.get(entry.name), time.time()
            )
        except (KafkaError, OSError) as error:
            status = StreamStatus(entry.name, policy.slo_s * 1000, decision=decision, problem=f"Kafka: {error}")
        later = later_stage_layouts(spec, entry_stages(entry)[1:])
        statuses.append(dataclasses.replace(status, driver=driver_of(spec.elastic_root), later_stages=later))
    return statuses


def status_command(
    once: bool = typer.Option(False, "--once", help="Print the table once and exit (no live refresh)."),
    interval: float = typer.Option(5.0, min=0.5, help="Seconds between refreshes of the live view."),
    stream: list[str] | None = typer.Option(None, "--stream", "-s", help="Only these streams (repeatable)."),
    config: ConfigOption = None,
) -> None:
    """Every stream's channels, input and processed rates, lag, p99 vs SLO, and the elasticity
    sensor's last decision with its reason; refreshed live until Ctrl-C (printed once into a pipe or file)."""
    from rich.live import Live

    from orchestration.elasticity.status import render_status
    from orchestration.stack.project import load_settings

    with friendly_errors():
        settings = load_settings(config)
        previous: dict[str, OffsetSample | None] = {}
        # A live view redraws in place; into a pipe or a file it would print nothing until Ctrl-C.
        if once or not console.is_terminal:
            console.print(render_status(_read_all(settings, stream, previous)))
            return
        with Live(render_status(_read_all(settings, stream, previous)), console=console, screen=False) as live:
            try:
                while True:
                    time.sleep(interval)
                    live.update(render_status(_read_all(settings, stream, previous)))
            except KeyboardInterrupt:
                pass
