"""The decision record: what the controller decided, from which signals, by which rule, and why.

A `Decision` is immutable and JSON-serializable, so the Dagster sensor can put it in a run's
tags/config and the benchmarks can dump every decision of a simulated run. `reason` is one
sentence a person can read in the Dagster UI: the signals, the rule and the target.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Action = Literal["none", "scale_out", "scale_in", "split", "merge"]

RESCALE_ACTIONS: frozenset[str] = frozenset({"scale_out", "scale_in", "split", "merge"})


class Decision(BaseModel):
    """One tick's outcome. `action == "none"` still says why nothing happened (rule and reason)."""

    model_config = ConfigDict(frozen=True)

    time_s: float = Field(description="Clock time of the decision.")
    action: Action = Field(description="What to do with the stage.")
    from_channels: int = Field(description="Channels before the decision.")
    to_channels: int = Field(description="Channels after the decision is realized.")
    channel: int | None = Field(None, description="The channel to split or merge; None for even rescales.")
    rule: str = Field(description="The rule that decided: P1..P6, split, merge, cooldown, warmup, bounds.")
    signals: dict[str, float] = Field(default_factory=dict, description="The numbers the rule used.")
    reason: str = Field(description="One sentence: signals, rule, target.")

    @property
    def is_rescale(self) -> bool:
        return self.action in RESCALE_ACTIONS
