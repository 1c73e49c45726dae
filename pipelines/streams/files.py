"""What a stream's folders say, read from outside its process (the sensor, the resizing asset, benchmarks).

`StreamFiles(spec, stage)`: a stage's committed layout, pending migration and waiting rescale
request; the stream's heartbeat (newest checkpoint file) and a batch begun but not committed.
"""

from __future__ import annotations

import time

from elasticity.layout import Layout
from elasticity.migration.registry import LayoutRegistry, RegistryError
from elasticity.state import Location
from pipelines.streams.control import ControlChannel, RescaleRequest
from pipelines.streams.metrics import checkpoint_batch_ids
from pipelines.streams.names import FIRST_STAGE, stage_paths
from pipelines.streams.spec import StreamSpec


class CheckpointMismatch(RuntimeError):
    """The query's checkpoint and the channels' state cannot both be right: starting would
    take new input for replays (or replay input the state already holds)."""


def checkpoint_mismatch(checkpoint: str, planned: int | None, channel_batches: dict[int, int]) -> str | None:
    """Why the checkpoint (newest planned batch id, None if it has none) does not fit the
    channels' state (channel -> newest batch id it applied), or None if it fits.

    A channel applies batch b only after Spark planned b, so no channel can be ahead of the
    checkpoint's offsets log; one that is means the checkpoint was removed or restored from an
    older copy, and its batch ids restart below the state's versions."""
    ahead = {
        channel: batch for channel, batch in channel_batches.items() if batch > (-1 if planned is None else planned)
    }
    if not ahead:
        return None
    known = "no batch" if planned is None else f"batches up to {planned}"
    channel, batch = max(ahead.items(), key=lambda item: item[1])
    return (
        f"the checkpoint at {checkpoint} knows {known}, but channel {channel}'s state already holds batch {batch} "
        f"({len(ahead)} channel(s) ahead): the checkpoint was removed or restored from an older copy, so new input "
        "would be taken for replays. Restore the checkpoint that belongs to this state, or start the stream afresh by "
        "removing its whole folder (checkpoint, state and layout together)."
    )


class StreamFiles:
    """The stream's folders as seen from outside its process; the layout and rescale requests are
    those of one elastic stage (`stage`: the first by default)."""

    def __init__(self, spec: StreamSpec, stage: str = FIRST_STAGE) -> None:
        self.spec = spec
        self.stage = stage
        self.paths = stage_paths(spec.folder, stage)
        self.checkpoint = Location.of(spec.checkpoint)

    def registry(self) -> LayoutRegistry:
        return LayoutRegistry(Location.of(self.paths.elastic))

    def committed_layout(self) -> Layout | None:
        try:
            return self.registry().committed()
        except RegistryError:
            return None

    def pending_migration(self) -> int | None:
        try:
            return self.registry().pending()
        except FileNotFoundError:
            return None

    def pending_request(self) -> RescaleRequest | None:
        return ControlChannel(self.paths.control).take_request()

    def _batch_ids(self, folder: str) -> list[int]:
        return checkpoint_batch_ids(self.checkpoint.child(folder))

    def heartbeat_age_s(self, now_s: float | None = None) -> float | None:
        """Seconds since the query last began or committed a batch (None: it never ran)."""
        newest = [
            self._written_at(self.checkpoint.child(folder).file(str(ids[-1])))
            for folder in ("offsets", "commits")
            if (ids := self._batch_ids(folder))
        ]
        if not newest:
            return None
        return (time.time() if now_s is None else now_s) - max(newest)

    def _written_at(self, path: str) -> float:
        mtime = self.checkpoint.fs.get_file_info(path).mtime
        return 0.0 if mtime is None else mtime.timestamp()

    def newest_planned_batch(self) -> int | None:
        """The newest batch id the query's offsets log planned (None: no checkpoint yet)."""
        planned = self._batch_ids("offsets")
        return planned[-1] if planned else None

    def newest_committed_batch(self) -> int | None:
        """The newest batch the query committed (None: none yet)."""
        committed = self._batch_ids("commits")
        return committed[-1] if committed else None

    def batch_in_flight(self) -> int | None:
        """The id of a batch whose offsets are planned but not committed (a stop mid-batch)."""
        planned, committed = self._batch_ids("offsets"), self._batch_ids("commits")
        if planned and (not committed or planned[-1] > committed[-1]):
            return planned[-1]
        return None
