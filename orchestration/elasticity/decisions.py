"""The elasticity sensor's last decision, kept beside the stream (`control/last-decision.json`).

Every tick records what it decided (a rescale, or why not), so `esp status` shows it without
asking Dagster; the sensor's tick history in the UI holds the same sentences.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

DECISION_FILE = "last-decision.json"


class DecisionRecord(BaseModel):
    """One tick's outcome, in words."""

    model_config = ConfigDict(frozen=True)

    at: float = Field(description="Wall-clock seconds of the tick.")
    rescale: bool = Field(description="Whether the tick requested a rescale run.")
    rule: str = Field("", description="The controller rule that decided ('' when the loop did not run).")
    reason: str = Field(description="The decision's reason or the tick's skip reason.")


def write_decision(control_dir: str | Path, record: DecisionRecord) -> None:
    path = Path(control_dir) / DECISION_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.write_text(record.model_dump_json())
    os.replace(scratch, path)  # a reader never sees half a record


def read_decision(control_dir: str | Path) -> DecisionRecord | None:
    """The last recorded decision (None: none yet, or the file is unreadable)."""
    try:
        return DecisionRecord.model_validate(json.loads((Path(control_dir) / DECISION_FILE).read_text()))
    except (FileNotFoundError, ValueError, ValidationError):
        return None
