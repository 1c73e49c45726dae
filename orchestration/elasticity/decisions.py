"""The elasticity sensor's last decision, kept beside the stream (`control/last-decision.json`).

Every tick records what it decided (a rescale, or why not), so `esp status` shows it without
asking Dagster; the sensor's tick history in the UI holds the same sentences.
"""

from __future__ import annotations

import json
from os import PathLike, fspath

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from elasticity.state import Location

DECISION_FILE = "last-decision.json"


class DecisionRecord(BaseModel):
    """One tick's outcome, in words."""

    model_config = ConfigDict(frozen=True)

    at: float = Field(description="Wall-clock seconds of the tick.")
    rescale: bool = Field(description="Whether the tick requested a rescale run.")
    rule: str = Field("", description="The controller rule that decided ('' when the loop did not run).")
    reason: str = Field(description="The decision's reason or the tick's skip reason.")


def write_decision(control_dir: str | PathLike[str], record: DecisionRecord) -> None:
    # Atomic: a reader never sees half a record.
    Location.of(fspath(control_dir)).publish_bytes(DECISION_FILE, record.model_dump_json().encode(), sealed=False)


def read_decision(control_dir: str | PathLike[str]) -> DecisionRecord | None:
    """The last recorded decision (None: none yet, or the file is unreadable)."""
    try:
        stored = Location.of(fspath(control_dir)).read_document(DECISION_FILE)
        return None if stored is None else DecisionRecord.model_validate(json.loads(stored))
    except (FileNotFoundError, ValueError, ValidationError):
        return None
