"""One elastic stage of a stream, on the driver: its layout registry, its rescale requests and the
step that applies them at a batch boundary, its migrator and snapshots, and the calls of its batches.

A one-stage stream has one; a job with further `Stage`s has one per stage, each in its own folders
(`names.stage_paths`) with its own metrics topic, so rescaling one stage never touches another's
layout or state. All of a stream's stages are fenced by the stream's one lease.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from elasticity.layout import Layout
from elasticity.lease import Fence
from elasticity.migration import Migrator, RecoveryResult
from elasticity.migration.registry import LayoutRegistry
from elasticity.state import BytesCodec, HistoryBackend, Location
from pipelines.elastic_stage import StageSpec
from pipelines.streams.control import ControlChannel
from pipelines.streams.metrics import BatchMetrics
from pipelines.streams.names import FIRST_STAGE, StagePaths, stage_paths
from pipelines.streams.reporting import MetricsOutlet
from pipelines.streams.rescaling import BatchBoundaryRescale
from pipelines.streams.snapshots import ChannelSnapshots
from pipelines.streams.spec import StreamSpec
from pipelines.streams.stage_calls import StageCalls


@dataclass
class StageRuntime:
    """The driver's side of one elastic stage (see the module's docstring)."""

    spark: SparkSession
    spec: StreamSpec
    name: str = FIRST_STAGE
    initial_channels: int | None = None
    """Channels when the stage first starts (None: the stream's `channels`)."""
    executor_target: Callable[[int], int | None] = lambda channels: None
    last_metrics: BatchMetrics | None = None
    """The stage's metrics of the stream's last batch."""
    _migrator: Migrator | None = None
    _snapshots: ChannelSnapshots | None = None
    _fence: Fence | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.paths: StagePaths = stage_paths(self.spec.folder, self.name)
        self.stage = StageSpec(
            self.spec.name if self.name == FIRST_STAGE else f"{self.spec.name}.{self.name}",
            self.paths.elastic,
            self.paths.local,
            self.spec.store_kind,
            self.spec.service_ms_per_record_of(self.name),
        )
        self.registry = LayoutRegistry(Location.of(self.paths.elastic))
        self.control = ControlChannel(self.paths.control)
        self.calls = StageCalls(self.spark, self.spec, self.registry)
        # The migrator and snapshots are passed as getters: both are rebuilt under the lease's
        # fence and closed at stop.
        self.rescaling = BatchBoundaryRescale(
            self.registry, self.control, self.migrator, self.snapshots, lambda: self.last_metrics, self.executor_target
        )
        self.outlet = MetricsOutlet(self.spec, self.name)

    @property
    def channels_at_start(self) -> int:
        return self.initial_channels or self.spec.channels

    def fence_with(self, fence: Fence | None) -> None:
        """Every write of this stage checks `fence` (the stream's lease) from now on."""
        self._fence = fence
        self.stage = dataclasses.replace(self.stage, fence=fence)
        self._migrator = None  # rebuilt with the fence

    def prepare(self) -> RecoveryResult:
        """Commit the stage's first layout (kept if one is committed) and finish or roll back a
        rescale a crash interrupted."""
        Location.of(self.paths.elastic).ensure()
        self.registry.initialize(Layout.uniform(self.channels_at_start))
        return self.migrator().recover()

    def applied_batches(self) -> dict[int, int]:
        """channel → the newest batch its durable state holds."""
        backend = self.migrator().backend
        return {channel: backend.open(channel).version.batch for channel in backend.channels()}

    def migrator(self) -> Migrator:
        """The stage's migrator. It reads and writes channel state through the durable history
        only (`HistoryBackend`): the live working sets are in the executors' RocksDB, so opening
        RocksDB stores here would rebuild whole channels inside the pause; the history gives
        donate exactly the moved ranges, and executors apply the migration record by `sync()`.
        Keys are not counted here (that would fold every channel): the last batch's metrics
        already carry each channel's key count."""
        if self._migrator is None:
            # Bytes: the stores hold the operator codec's encoding, which a migration moves as is.
            backend = HistoryBackend(BytesCodec(), durable=self.paths.elastic)
            fence = self._fence.check if self._fence is not None else None
            self._migrator = Migrator(
                Location.of(self.paths.elastic), backend, count_keys=False, max_workers=8, fence=fence
            )
        return self._migrator

    def use_migrator(self, migrator: Migrator) -> None:
        """Replace the stage's migrator (tests inject one with a crash hook)."""
        self._migrator = migrator

    def snapshots(self) -> ChannelSnapshots:
        """The stage's snapshot policy and writer (`pipelines.streams.snapshots`)."""
        if self._snapshots is None:
            fence = self._fence.check if self._fence is not None else None
            self._snapshots = ChannelSnapshots(self.spec.snapshots, self.paths.elastic, fence)
        return self._snapshots

    def close(self) -> None:
        """Stop the snapshot writer, close the migrator's stores and the metrics producer."""
        self.outlet.close()
        if self._snapshots is not None:
            self._snapshots.close()
            self._snapshots = None
        if self._migrator is not None:
            self._migrator.backend.close()
            self._migrator = None
