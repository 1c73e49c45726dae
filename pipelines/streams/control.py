"""How the outside world asks a running stream to rescale, and learns the outcome.

A request is a JSON file in the stream's control folder. It carries the layout its sender
planned on the committed epoch it names, so what the sender showed (moved ranges, shares) is
exactly what the stream applies. The stream picks it up at the next micro-batch boundary
(before routing that batch: the horizontal barrier), migrates, commits the new layout, and
publishes a typed `RescaleResult` as `result-<id>.json`. Files are written temp-then-rename.

Answers are kept for their readers, not for ever: a stream rescaling every few minutes for
months would fill its control folder with them. Each publication forgets the answers beyond the
newest `KEEP_ANSWERS` that are also older than `ANSWER_MIN_AGE_S` (a waiter polls for its answer
every fraction of a second; the age leaves any slow reader minutes to read it).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Annotated, Any, Literal

import pyarrow.fs as pafs
from pydantic import BaseModel, Field, PlainSerializer, PlainValidator, ValidationError, WithJsonSchema

from elasticity.layout import MAX_CHANNELS, Layout
from elasticity.migration.plan import MigrationPlan
from elasticity.migration.report import MigrationReport
from elasticity.state import CorruptFile, Location

REQUEST = "rescale-request.json"
KEEP_ANSWERS = 32
"""Answers (results and set-aside requests) always kept, newest first, whatever their age."""
ANSWER_MIN_AGE_S = 600.0
"""An answer younger than this is never forgotten, however many newer ones there are."""

log = logging.getLogger(__name__)


class RescaleTarget(BaseModel):
    """What the next layout should be."""

    op: Literal["scale_to", "split", "merge"] = Field(
        ..., description="scale_to N channels, split or merge one channel."
    )
    channels: int | None = Field(
        None, ge=1, le=MAX_CHANNELS, description="scale_to: the channel count wanted (at most MAX_CHANNELS)."
    )
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


def _as_layout(value: Any) -> Layout:
    return value if isinstance(value, Layout) else Layout.from_dict(value)


LayoutField = Annotated[
    Layout,
    PlainValidator(_as_layout),
    PlainSerializer(lambda layout: layout.to_dict(), return_type=dict),
    WithJsonSchema({"type": "object", "description": "A layout in its JSON form (Layout.to_dict)."}),
]
"""A `Layout` in a pydantic model, in the same JSON form as the layout registry's files."""


class RescaleRequest(BaseModel):
    """One rescale asked of a running stream; answered once, by `result-<request_id>.json`."""

    request_id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12], description="Correlates request and result.")
    target: RescaleTarget
    base_epoch: int | None = Field(
        None, ge=0, description="The committed layout epoch it was planned on; refused as stale at any other."
    )
    planned: LayoutField | None = Field(
        None,
        description="The next layout as planned on base_epoch; applied as given (None: the stream plans it "
        "from the target, for hand-written requests).",
    )
    reason: str = Field("", description="Why (the controller's sentence, or 'manual').")
    requested_at: float = Field(default_factory=time.time, description="Unix time of the request.")

    def stale_at(self, epoch: int) -> bool:
        """Planned on another committed epoch than `epoch`: the stream refuses it."""
        return self.base_epoch is not None and self.base_epoch != epoch


class RescaleResult(BaseModel):
    """The one answer to a `RescaleRequest`."""

    request_id: str = Field(..., description="The request answered.")
    status: Literal["committed", "failed"] = Field(..., description="committed, or failed (rolled back).")
    mode: Literal["online", "offline"] = Field("online", description="Applied by the running stream or offline.")
    reason: str = Field("", description="The request's reason.")
    error: str | None = Field(None, description="Why it failed (failed only).")
    requested_at: float | None = Field(None, description="Unix time of the request.")
    pause_ms: float = Field(0.0, description="How long the stream held its batch for the rescale.")
    snapshot_wait_ms: float = Field(
        0.0, description="How long the rescale waited, before its pause, for a snapshot being written to end."
    )
    layout: LayoutField | None = Field(None, description="The committed layout (committed only).")
    report: MigrationReport | None = Field(
        None, description="What the migration cost (None when answered from a record after a restart)."
    )
    recovered: bool = Field(False, description="Answered from the migration's record after a restart.")
    executors: int | None = Field(
        None, description="Executors asked for the new layout's channels (None: executors do not follow channels)."
    )

    @property
    def committed(self) -> bool:
        return self.status == "committed"


def next_layout_of(request: RescaleRequest, current: Layout) -> Layout:
    """The layout `request` asks for on top of `current`: the one its sender planned, or, for a
    request without one, the target's; ValueError when it makes no sense.

    A planned layout is applied as given, not re-planned (its ring is whole, or the request would
    not have parsed). It must be a successor of `current`, as every layout operation's result is:
    no hash range moves between two channels present in both, so only the channels the change
    names give or take state. The stream checks it before migrating, to say so plainly."""
    if request.planned is None:
        return request.target.next_layout(current)
    if request.base_epoch is None:
        raise ValueError("a request with a planned layout must name the epoch it was planned on (base_epoch)")
    if request.planned.renumbered(current.epoch) == current:
        raise ValueError(f"the planned layout is the committed one (epoch {current.epoch}): nothing to do")
    if crossing := MigrationPlan.between(current, request.planned).unexpected_moves():
        first = crossing[0]
        raise ValueError(
            f"the planned layout is not a successor of committed epoch {current.epoch}: {len(crossing)} hash "
            f"range(s) move between channels kept in both (first: channel {first.source} -> {first.target}); "
            "plan it again on the committed layout"
        )
    return request.planned


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
        try:
            raw = self.location.read_bytes(REQUEST, verify=False)  # people and other tools write requests too
        except CorruptFile as corrupt:  # sealed by esp, then damaged: as stuck as a malformed one
            self._set_aside(self.location.read_raw(REQUEST), f"corrupt rescale request: {corrupt}")
            return None
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

    def publish_result(self, result: RescaleResult) -> None:
        self.location.publish_bytes(f"result-{result.request_id}.json", result.model_dump_json().encode())
        self.location.delete_file(REQUEST)
        self.forget_old_answers()

    def answers(self) -> list[str]:
        """The request ids answered and still kept, oldest first."""
        return [
            name.removeprefix("result-").removesuffix(".json")
            for name in oldest_first(self.location, "result-", ".json")
        ]

    def forget_old_answers(self, keep: int = KEEP_ANSWERS, min_age_s: float = ANSWER_MIN_AGE_S) -> None:
        """Delete results and set-aside requests beyond the newest `keep` of each kind that were
        written more than `min_age_s` ago."""
        for name in forgettable(self.location, "result-", ".json", keep, min_age_s):
            self.location.delete_file(name)
        for reason in forgettable(self.location, "rejected-", ".reason", keep, min_age_s):
            self.location.delete_file(reason.removesuffix(".reason") + ".json")
            self.location.delete_file(reason)

    def result(self, request_id: str) -> RescaleResult | None:
        name = f"result-{request_id}.json"
        if not self.location.exists(name):
            return None
        return RescaleResult.model_validate_json(self.location.read_bytes(name))

    def wait_for_result(self, request_id: str, timeout_s: float, poll_s: float = 0.2) -> RescaleResult:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (found := self.result(request_id)) is not None:
                return found
            time.sleep(poll_s)
        raise TimeoutError(
            f"the stream did not answer rescale request {request_id} within {timeout_s:.0f}s; is it running?"
        )


def written_at(location: Location) -> dict[str, float]:
    """When each file of `location` was last written (epoch seconds), by name."""
    infos = location.fs.get_file_info(pafs.FileSelector(location.path, allow_not_found=True))
    return {i.base_name: i.mtime.timestamp() if i.mtime is not None else 0.0 for i in infos}


def oldest_first(location: Location, prefix: str, suffix: str, written: dict[str, float] | None = None) -> list[str]:
    """Names in `location` with that prefix and suffix, oldest written first."""
    written = written_at(location) if written is None else written
    names = [n for n in written if n.startswith(prefix) and n.endswith(suffix)]
    return sorted(names, key=lambda n: (written[n], n))


def forgettable(location: Location, prefix: str, suffix: str, keep: int, min_age_s: float) -> list[str]:
    """The names `oldest_first` lists beyond the newest `keep` that were written over `min_age_s` ago."""
    written = written_at(location)
    cutoff = time.time() - min_age_s
    names = oldest_first(location, prefix, suffix, written)
    return [name for name in names[: max(len(names) - keep, 0)] if written[name] < cutoff]
