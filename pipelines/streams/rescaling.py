"""Applying a pending rescale request at a batch boundary (the horizontal barrier): before a batch
routes any record, the request in the control folder is taken, migrated under the next epoch, and
answered there exactly once, committed or failed with its reason.

A request is answered, never applied twice: one whose migration ended before a driver crash is
answered from the migrator's record; a stale one (planned on another epoch) is refused; one that
arrives while the batch is a replay some channels already applied waits for the next boundary.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from elasticity.layout import Layout
from elasticity.migration import Migrator, RecordedOutcome
from elasticity.migration.registry import LayoutRegistry
from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleResult, next_layout_of
from pipelines.streams.metrics import BatchMetrics
from pipelines.streams.snapshots import ChannelSnapshots

log = logging.getLogger(__name__)


def channels_asked(control: ControlChannel, current: Layout) -> int | None:
    """The channels of the layout the waiting request asks for on `current`; None when no request
    waits or the boundary will refuse it (planned on another epoch, or a target that makes no sense).

    Read (not taken) before the next batch is planned: that batch applies the request, so its
    records cap is the new layout's, not the one the old layout leaves (`pipelines.streams.cap_switch`)."""
    request = control.take_request()
    if request is None or request.stale_at(current.epoch):
        return None
    try:
        return next_layout_of(request, current).n_channels
    except ValueError:
        return None


@dataclass(frozen=True)
class BatchBoundaryRescale:
    """The stream's rescale step. The migrator and snapshots are asked for at each use, not kept:
    the stream rebuilds them when its lease fences them, and closes them at its stop."""

    registry: LayoutRegistry
    control: ControlChannel
    migrator: Callable[[], Migrator]
    snapshots: Callable[[], ChannelSnapshots]
    last_metrics: Callable[[], BatchMetrics | None]
    """The stream's last batch's metrics: they carry each channel's key count for the report."""
    executor_target: Callable[[int], int | None] = lambda channels: None
    """Executors a layout of so many channels gets (None: executors do not follow channels)."""

    def apply_pending(self, batch_id: int) -> RescaleResult | None:
        """Apply the pending request, if any, before batch `batch_id`; its answer (None: no request,
        or one that waits for the next boundary)."""
        request = self.control.take_request()
        if request is None:
            return None
        waited = time.perf_counter()
        with self.snapshots().paused():  # a migration may drop a channel a snapshot is writing
            return self._rescale(request, batch_id, snapshot_wait_ms=(time.perf_counter() - waited) * 1000)

    def channels_holding(self, layout: Layout, batch_id: int) -> list[int]:
        """Channels of `layout` whose durable state already includes `batch_id` (a listing each)."""
        backend = self.migrator().backend
        return [channel for channel in layout.channels if backend.open(channel).is_committed(batch_id)]

    def _rescale(self, request: RescaleRequest, batch_id: int, snapshot_wait_ms: float) -> RescaleResult | None:
        current = self.registry.committed()
        migrator = self.migrator()
        recorded = migrator.recorded_outcome(request.request_id, self.registry.next_epoch() - 1)
        if recorded is not None:
            # Taken before a crash that came after its migration ended: answer, never apply twice.
            return self._answer_recorded(request, recorded)
        if request.stale_at(current.epoch):
            return self._refuse(
                request,
                f"stale request: planned on layout epoch {request.base_epoch}, the stream is at {current.epoch}",
            )
        if holding := self.channels_holding(current, batch_id):
            # A replay after a crash mid-batch: these channels already applied this batch. A
            # migration now would move keys with and without its increments and the replay
            # would then skip or re-apply them per channel. The batch first completes under the
            # layout it began with; the request waits for the next boundary.
            log.warning(
                "rescale %s waits: batch %d is a replay that channels %s already applied",
                request.request_id,
                batch_id,
                holding,
            )
            return None
        started = time.perf_counter()
        try:
            # Epochs are never reused (a rolled-back one stays taken), so the planned layout
            # gets the registry's next epoch, whatever number its sender gave it.
            new = next_layout_of(request, current).renumbered(self.registry.next_epoch())
            report = migrator.migrate(new, request_id=request.request_id)
            report.keys_total = self._state_keys(current)
        except Exception as error:  # refused or failed: the stream keeps the committed layout
            if self.registry.pending() is not None:
                # "Failed" means rolled back: never rolled forward later by a recover(). A
                # failure after the commit point is finished instead, and answered as committed.
                migrator.rollback()
                recorded = migrator.recorded_outcome(request.request_id, self.registry.next_epoch() - 1)
                if recorded is not None and recorded.committed:
                    return self._answer_recorded(request, recorded)
            return self._refuse(request, str(error))
        result = RescaleResult(
            request_id=request.request_id,
            status="committed",
            reason=request.reason,
            pause_ms=(time.perf_counter() - started) * 1000,
            snapshot_wait_ms=snapshot_wait_ms,
            requested_at=request.requested_at,
            layout=new,
            report=report,
            executors=self.executor_target(new.n_channels),
        )
        self.control.publish_result(result)
        return result

    def _refuse(self, request: RescaleRequest, error: str) -> RescaleResult:
        result = RescaleResult(
            request_id=request.request_id,
            status="failed",
            reason=request.reason,
            requested_at=request.requested_at,
            error=error,
        )
        self.control.publish_result(result)
        log.error("rescale %s failed: %s", request.request_id, error)
        return result

    def _answer_recorded(self, request: RescaleRequest, recorded: RecordedOutcome) -> RescaleResult:
        if not recorded.committed:
            return self._refuse(request, recorded.error or "rolled back")
        result = RescaleResult(
            request_id=request.request_id,
            status="committed",
            reason=request.reason,
            requested_at=request.requested_at,
            layout=self.registry.load(recorded.epoch),
            recovered=True,
        )
        self.control.publish_result(result)
        log.warning("rescale %s had committed before a restart; its outcome is published now", request.request_id)
        return result

    def _state_keys(self, layout: Layout) -> int | None:
        """Keys held under `layout`, from the last batch's per-channel metrics (None if unknown)."""
        last = self.last_metrics()
        if last is None or last.epoch != layout.epoch:
            return None
        return sum(c.state_keys for c in last.per_channel)
