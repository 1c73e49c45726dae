"""How the outside world asks a running stream to rescale, and learns the outcome.

A request is a JSON file in the stream's control folder. The stream picks it up at the next
micro-batch boundary (before routing that batch: the horizontal barrier), migrates, commits
the new layout, and publishes `result-<id>.json`. Files are written temp-then-rename.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from elasticity.layout import Layout
from elasticity.state import Location

REQUEST = "rescale-request.json"

log = logging.getLogger(__name__)


class RescaleTarget(BaseModel):
    """What the next layout should be."""

    op: Literal["scale_to", "split", "merge"] = Field(
        ..., description="scale_to N channels, split or merge one channel."
    )
    channels: int | None = Field(None, ge=1, description="scale_to: the channel count wanted.")
    channel: int | None = Field(None, ge=0, description="split/merge: the channel id.")

    def next_layout(self, current: Layout) -> Layout:
        """The layout of epoch E+1 this target asks for; ValueError if it makes no sense."""
        if self.op == "scale_to":
            if self.channels is None:
                raise ValueError("scale_to needs `channels`")
            delta = self.channels - current.n_channels
            if delta == 0:
                raise ValueError(f"the stream already has {current.n_channels} channels")
            return current.scale_out(delta) if delta > 0 else current.scale_in(-delta)
        if self.channel is None or self.channel not in current.channels:
            raise ValueError(f"{self.op} needs a channel among {list(current.channels)}, got {self.channel}")
        if self.op == "split":
            return current.split(self.channel)
        if current.n_channels == 1:
            raise ValueError("cannot merge the only channel")
        return current.merge(self.channel)


class RescaleRequest(BaseModel):
    """One rescale asked of a running stream; answered once, by `result-<request_id>.json`."""

    request_id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12], description="Correlates request and result.")
    target: RescaleTarget
    base_epoch: int | None = Field(
        None, ge=0, description="The committed layout epoch it was planned on; refused as stale at any other."
    )
    reason: str = Field("", description="Why (the controller's sentence, or 'manual').")
    requested_at: float = Field(default_factory=time.time, description="Unix time of the request.")


class ControlChannel:
    """The control folder of one stream."""

    def __init__(self, folder: str) -> None:
        self.location = Location.of(folder)
        self.location.ensure()

    def request(self, request: RescaleRequest) -> None:
        if self.location.exists(REQUEST):
            pending = RescaleRequest.model_validate_json(self.location.read_bytes(REQUEST, verify=False))
            raise RuntimeError(f"a rescale request ({pending.request_id}) is already waiting for the stream")
        self.location.publish_bytes(REQUEST, request.model_dump_json().encode())

    def take_request(self) -> RescaleRequest | None:
        """The waiting request, if any (it stays until its result is published).

        A request file that does not parse is set aside as `rejected-<time>.json` with a
        `.reason` beside it: left in place it would fail every batch of the stream for good."""
        if not self.location.exists(REQUEST):
            return None
        raw = self.location.read_bytes(REQUEST, verify=False)  # people and other tools write requests too
        try:
            return RescaleRequest.model_validate_json(raw)
        except ValidationError as error:
            self._set_aside(raw, f"malformed rescale request: {error}")
            return None

    def _set_aside(self, raw: bytes, reason: str) -> None:
        name = f"rejected-{time.time_ns()}"
        self.location.publish_bytes(f"{name}.json", raw)
        self.location.publish_bytes(f"{name}.reason", reason.encode())
        self.location.delete_file(REQUEST)
        log.error("%s (kept as %s.json)", reason.splitlines()[0], name)

    def rejected(self) -> list[str]:
        """Why each set-aside request was refused, oldest first."""
        return [self.location.read_bytes(n).decode() for n in self.location.names() if n.endswith(".reason")]

    def publish_result(self, request_id: str, result: dict[str, Any]) -> None:
        self.location.publish_bytes(f"result-{request_id}.json", json.dumps(result, default=str).encode())
        self.location.delete_file(REQUEST)

    def result(self, request_id: str) -> dict[str, Any] | None:
        name = f"result-{request_id}.json"
        return self.location.read_json(name) if self.location.exists(name) else None

    def wait_for_result(self, request_id: str, timeout_s: float, poll_s: float = 0.2) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (found := self.result(request_id)) is not None:
                return found
            time.sleep(poll_s)
        raise TimeoutError(
            f"the stream did not answer rescale request {request_id} within {timeout_s:.0f}s; is it running?"
        )
