"""What every esp command shares: the console, the --config option, clean error exits."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

console = Console()

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="esp settings file (YAML or JSON); default: $ESP_CONFIG or built-in defaults."),
]


AdmissionHighOption = Annotated[
    float | None,
    typer.Option(
        "--admission-high",
        min=0.01,
        help="Admission control (seed 004): cap the records per batch while batches take longer than this many "
        "seconds (the high watermark; default: off).",
    ),
]
AdmissionLowOption = Annotated[
    float | None,
    typer.Option(
        "--admission-low", min=0.01, help="Admission control's low watermark, seconds (default: 0.4 × the high one)."
    ),
]


def admission_options(high_s: float | None, low_s: float | None):  # -> AdmissionOptions | None
    """The admission options the two watermark flags name (None: off); a bad pair is a usage error."""
    from elasticity.admission import AdmissionOptions

    try:
        return AdmissionOptions.from_watermarks(high_s, low_s)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--admission-high/--admission-low") from None


@contextmanager
def friendly_errors() -> Iterator[None]:
    """Turn esp's own errors into one red line and exit code 1, instead of a stack trace.

    CorruptFile is a ValueError too; it is named so that no narrowing of the ValueError catch-all
    lets a damaged state file print a stack trace instead of its path and what to do."""
    from elasticity.lease import LeaseHeld
    from elasticity.state import CorruptFile
    from orchestration.stack.errors import StackError
    from pipelines.kafka_topics import KafkaUnavailableError, TopicMismatchError, UnknownTopicError
    from pipelines.settings import SettingsError
    from pipelines.streams.files import CheckpointMismatch

    try:
        yield
    except (
        StackError,
        SettingsError,
        KafkaUnavailableError,
        UnknownTopicError,
        TopicMismatchError,
        CheckpointMismatch,
        LeaseHeld,
        CorruptFile,
        ValueError,
    ) as err:
        # One line however long (a path and what to do), and the message printed as it is:
        # file paths and Arrow errors hold brackets that rich would take for markup.
        console.print(f"[bold red]error:[/] {escape(str(err))}", soft_wrap=True)
        raise typer.Exit(code=1) from None
