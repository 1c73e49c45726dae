"""`esp stream …`: run an elastic stream in the foreground, ask a running one to rescale."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from orchestration.cli.common import (
    AdmissionHighOption,
    AdmissionLowOption,
    ConfigOption,
    admission_options,
    console,
    friendly_errors,
)

if TYPE_CHECKING:  # the CLI imports the stream's modules lazily, for a quick start
    from elasticity.layout import Layout
    from pipelines.streams.control import RescaleResult

stream_app = typer.Typer(help="Elastic stream jobs.", no_args_is_help=True)


def _spec(settings, name: str, job: str | None, topic: str | None, root: str | None, **options):
    """The stream's spec: a catalogued stream's declared settings (built-in or streams.yaml), else
    StreamSpec's defaults; then the options the command line set (None: not set)."""
    from orchestration.streams.catalog import StreamEntry, catalog_streams, stream_spec

    entry = next((e for e in catalog_streams() if e.name == name), None)
    if entry is None:
        entry = StreamEntry(name=name, job=job or "wordcount", input_topic=topic or "words")
    elif job is not None:
        entry = entry.model_copy(update={"job": job})
    given = {option: value for option, value in options.items() if value is not None}
    return stream_spec(settings, entry, input_topic=topic, root=root, **given)


@stream_app.command("run")
def run(
    name: str = typer.Option(
        "wordcount", help="Stream name (prefixes its topics and folders); a catalogued one starts from its settings."
    ),
    job: str | None = typer.Option(
        None, help="Job: wordcount, adclicks, or a user job as module:function (default: the catalogued stream's)."
    ),
    topic: str | None = typer.Option(None, help="Input topic (default: the catalogued stream's, else words)."),
    channels: int | None = typer.Option(
        None, min=1, help="Channels of the elastic stage at first start (default: the stream's setting, 4)."
    ),
    trigger: float | None = typer.Option(None, help="Micro-batch trigger interval, seconds (default: 1)."),
    max_offsets: int | None = typer.Option(None, help="Cap on records per micro-batch."),
    max_records_per_channel: int | None = typer.Option(
        None,
        min=1,
        help="Cap on records per micro-batch per channel: bounds a rescale's wait for the batch in flight "
        "(default: none).",
    ),
    root: str | None = typer.Option(
        None, help="Stream folder: a path or a file:// or s3:// URI (default: <run dir>/streams/<name>)."
    ),
    observe_every: float = typer.Option(5.0, help="Seconds between printed observations."),
    service_ms: float | None = typer.Option(
        None, min=0.0, help="Simulated per-record service time of the stage, ms (I/O-bound stage; default 0)."
    ),
    stage_service_ms: list[str] | None = typer.Option(
        None,
        "--stage-service-ms",
        help="A stage's own simulated per-record service time as stage=ms (repeatable; e.g. pages=4).",
    ),
    compact_every: int | None = typer.Option(
        None, min=0, help="Compact the results and late tables every N batches (default: the stream spec's, 100)."
    ),
    bronze_retention_days: float | None = typer.Option(
        None, min=0.0001, help="Days of bronze archive kept, fractions allowed (default: the stream spec's, 7)."
    ),
    admission_high: AdmissionHighOption = None,
    admission_low: AdmissionLowOption = None,
    snapshots: str | None = typer.Option(
        None,
        help="When channels snapshot their state: adaptive (seed 003: a recovery-time bound and peak avoidance) "
        "or fixed (a fixed period); default: the stream's setting, adaptive.",
    ),
    max_recovery: float | None = typer.Option(
        None, min=0.01, help="Adaptive snapshots: the predicted recovery never to pass, seconds (default 3)."
    ),
    snapshot_period: float | None = typer.Option(
        None,
        min=0.01,
        help="Snapshot period, seconds: the adaptive policy's checkpoint period (default 9), or the fixed "
        "policy's (default: every 25 batches).",
    ),
    config: ConfigOption = None,
) -> None:
    """Run a stream in the foreground until Ctrl-C or SIGTERM (graceful: the batch finishes)."""
    from orchestration.stack.project import load_settings
    from pipelines.spark_session import build_spark_session
    from pipelines.streams.runner import refuse_if_held
    from pipelines.streams.service import StreamService

    with friendly_errors():
        settings = load_settings(config)
        spec = _spec(
            settings,
            name,
            job,
            topic,
            root,
            channels=channels,
            trigger_seconds=trigger,
            max_offsets_per_trigger=max_offsets,
            max_records_per_channel=max_records_per_channel,
            service_ms_per_record=service_ms,
            stage_service_ms_per_record=_stage_costs(stage_service_ms),
            compact_every_batches=compact_every,
            bronze_retention_days=bronze_retention_days,
            admission=admission_options(admission_high, admission_low),
            snapshots=_snapshots(snapshots, max_recovery, snapshot_period),
        )
        refuse_if_held(spec)
        session = build_spark_session(settings, roots=(spec.root,))
        service = StreamService(session, spec, settings.spark.executors)
        signal.signal(signal.SIGTERM, lambda *_: service.request_stop())

        def show(observation) -> None:
            console.print(observation.as_metadata())

        try:
            service.run(observe_every, show)
        except KeyboardInterrupt:
            service.stop()
    console.print(f"stream {name} stopped")


def _stage_costs(given: list[str] | None) -> dict[str, float] | None:
    """`--stage-service-ms pages=4 ...` as {stage: ms} (None: none given)."""
    if not given:
        return None
    costs = {}
    for item in given:
        stage, sep, ms = item.partition("=")
        try:
            costs[stage.strip()] = float(ms)
        except ValueError:
            sep = ""
        if not sep or not stage.strip():
            raise typer.BadParameter(f"{item!r} is not stage=ms (e.g. pages=4)", param_hint="--stage-service-ms")
    return costs


def _snapshots(policy: str | None, max_recovery_s: float | None, period_s: float | None):
    """The snapshot options the command line sets (None: none set, the stream's own apply)."""
    from elasticity.snapshots.planner import SnapshotOptions

    if (policy, max_recovery_s, period_s) == (None, None, None):
        return None
    policy = policy or "adaptive"
    if policy not in ("adaptive", "fixed"):
        raise typer.BadParameter(f"{policy!r} is not adaptive or fixed", param_hint="--snapshots")
    try:
        return SnapshotOptions.choose(policy, max_recovery_s, period_s)  # type: ignore[arg-type]
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--max-recovery") from None


def _committed_layout(folder: str, stage: str = "main") -> Layout | None:
    """The committed layout of the stream's elastic stage `stage` (None before its first start)."""
    from elasticity.migration import LayoutRegistry, RegistryError
    from elasticity.state import Location
    from pipelines.streams.names import stage_paths

    try:
        return LayoutRegistry(Location.of(stage_paths(folder, stage).elastic)).committed()
    except RegistryError:
        return None


@stream_app.command("rescale")
def rescale(
    name: str = typer.Option("wordcount", help="Stream name."),
    channels: int | None = typer.Option(None, help="Scale to this many channels."),
    split: int | None = typer.Option(None, help="Split this channel."),
    merge: int | None = typer.Option(None, help="Merge this channel into its neighbours."),
    stage: str = typer.Option("main", help="Which elastic stage of the job (a multi-stage job's `Stage` name)."),
    root: str | None = typer.Option(
        None, help="Stream folder: a path or a file:// or s3:// URI (default: <run dir>/streams/<name>)."
    ),
    timeout: float = typer.Option(120.0, help="Seconds to wait for the stream to apply it."),
    config: ConfigOption = None,
) -> None:
    """Ask a running stream to rescale at its next batch boundary, and wait for the outcome."""
    from elasticity.state import uris
    from orchestration.stack.project import load_settings
    from orchestration.streams.catalog import stream_root
    from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleTarget
    from pipelines.streams.names import stage_paths

    with friendly_errors():
        chosen = [x is not None for x in (channels, split, merge)]
        if sum(chosen) != 1:
            raise ValueError("give exactly one of --channels, --split, --merge")
        target = (
            RescaleTarget(op="scale_to", channels=channels)
            if channels is not None
            else RescaleTarget(op="split", channel=split)
            if split is not None
            else RescaleTarget(op="merge", channel=merge)
        )
        settings = load_settings(config)
        folder = uris.canonical(root or stream_root(settings, name))
        control = ControlChannel(stage_paths(folder, stage).control)
        current = _committed_layout(folder, stage)
        if current is None and stage != "main":
            raise ValueError(f"stream {name} has no elastic stage {stage!r} (or has not started yet)")
        # Planned here, once, on the committed layout; the stream refuses it if it rescaled meanwhile.
        request = RescaleRequest(
            target=target,
            reason="manual (esp stream rescale)",
            base_epoch=current.epoch if current is not None else None,
            planned=target.next_layout(current).renumbered(current.epoch + 1) if current is not None else None,
        )
        control.request(request)
        with console.status("waiting for the stream's next batch boundary…"):
            result = control.wait_for_result(request.request_id, timeout)
    console.print(result_table(result))
    if not result.committed:
        raise typer.Exit(code=1)


def result_table(result: RescaleResult) -> Table:
    """The answer's figures, one row each."""
    table = Table("field", "value")
    table.add_row("status", result.status)
    if result.error is not None:
        table.add_row("error", result.error)
    if result.report is not None:
        report = result.report
        table.add_row("operation", report.operation)
        table.add_row("channels", f"{report.channels_before} → {report.channels_after}")
        table.add_row("keys_moved", str(report.keys_moved))
    if result.committed:
        table.add_row("pause_ms", f"{result.pause_ms:.1f}")
    return table
