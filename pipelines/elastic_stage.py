"""The elastic keyed stage's machinery: rows routed by the current layout to N channels in the JVM,
each channel's state opened (and kept) in the Python worker that runs its one Spark task, and the
per-task reports. `pipelines.operator_stage` runs a job's operator on it:

    rows ──xxhash64(key) in the JVM──► route in the JVM (layout lookup → channel, label)
        ──repartition(N, label)──► task p owns channel order[p] (its working set: `WorkerStores`)
        ──► output rows + one `ChannelMetrics` per task

The reports (records, keys, state size, probe latencies) travel back in a Spark accumulator
with each task's result: reading them as rows cost a second job over the cached output.

Routing is a Catalyst expression (a CASE over the layout's few dozen arc bounds), so rows
never visit a Python worker before the shuffle.

Placement is exact: the label of channel c is an integer whose Spark Murmur3 bucket is c's
place in the task order (`placement_labels`, computed with a port of Spark's Murmur3 that a test
checks against Spark itself), so `repartition(N, label)` puts every row of channel c, and nothing
else, in its one task. The order puts the channels new in a layout first (`task_order`): Spark
starts a stage's tasks in partition order, and a new channel's first task rebuilds its state.

State is versioned by batch id: a replayed batch finds its id committed (the operator runner's
replay contract recomputes its outputs).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark import AccumulatorParam
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from elasticity.layout import Layout
from elasticity.lease import Fence
from elasticity.state import BytesCodec, RocksStore, StateStore, StoreBackend
from elasticity.state.backend import channel_dir_name
from elasticity.state.kinds import StoreKind, build_backend
from pipelines import working_copies
from pipelines.channel_seeds import ChannelSeeds
from pipelines.column_cache import once_per_jvm
from pipelines.probes import is_valid_probe_of, probe_routing_key, probe_sent_ms
from pipelines.streams.metrics import ChannelMetrics
from pipelines.streams.names import FIRST_STAGE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageSpec:
    """What executors need to find a channel's state (picklable, shipped with the closures)."""

    stream: str
    durable_uri: str
    local_dir: str
    store_kind: StoreKind = "rocks"
    service_ms_per_record: float = 0.0
    fence: Fence | None = None
    """The driver's lease token: a task commits only while it is current (one writer per stream)."""


def probe_rows(raw: DataFrame, stage: str = FIRST_STAGE, key_column: str = "key") -> DataFrame:
    """The batch's valid probes of elastic stage `stage` among the raw Kafka rows, as stage input
    rows: `key_column` = the routing key that sends the probe to its channel, `key_hash` = its hash,
    `probe_sent_ms` = when it was sent. Invalid ones are the parsers' to dead-letter
    (`pipelines.probes.invalid_probe_check`)."""
    # DataFrame steps, not `spark.sql("... {raw}", raw=raw)`: Spark 4.2 wraps such an argument
    # in a view that misses `raw`'s cache, so the whole micro-batch was read from Kafka again.
    # Two steps, not four: each is analysed on the driver again in every batch.
    return raw.where(is_valid_probe_of(stage)).select(*_probe_input_columns(key_column))


@once_per_jvm
def _probe_input_columns(key_column: str) -> tuple[Column, ...]:
    """A valid probe's stage input row: the routing key (as `key_column`), its hash and the send time."""
    return (
        probe_routing_key().alias(key_column),
        F.xxhash64(probe_routing_key()).alias("key_hash"),
        probe_sent_ms().alias("probe_sent_ms"),
    )


_MASK32 = 0xFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK32


def _mix_k1(k1: int) -> int:
    return (_rotl32((k1 * 0xCC9E2D51) & _MASK32, 15) * 0x1B873593) & _MASK32


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl32(h1 ^ k1, 13) * 5 + 0xE6546B64) & _MASK32


def spark_hash_long(value: int, seed: int = 42) -> int:
    """Spark's `hash(<bigint>)`: Murmur3_x86_32.hashLong(value, 42), as a signed int32."""
    unsigned = value & 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & _MASK32, _mix_k1(unsigned & _MASK32))
    h1 = _mix_h1(h1, _mix_k1(unsigned >> 32))
    h1 ^= 8  # fmix(h1, length = 8 bytes)
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def placement_labels(n_partitions: int) -> list[int]:
    """label[p] = the smallest long whose `repartition(n, col)` bucket (pmod(hash(id), n)) is p.

    Pure Python (microseconds): a Spark job for this cost 0.2-2 s inside the first batch after
    a rescale to a new channel count. `spark_placement_labels` is the same search done by Spark."""
    labels: dict[int, int] = {}
    candidate = 0
    while len(labels) < n_partitions:
        if candidate > 64 * n_partitions + 64:
            raise RuntimeError(
                f"no placement label found for partitions {sorted(set(range(n_partitions)) - labels.keys())}"
            )
        labels.setdefault(spark_hash_long(candidate) % n_partitions, candidate)
        candidate += 1
    return [labels[p] for p in range(n_partitions)]


def spark_placement_labels(spark: SparkSession, n_partitions: int) -> list[int]:
    """`placement_labels` computed by Spark itself (the reference the tests compare with)."""
    found = (
        spark.range(0, 64 * n_partitions + 64)
        .select(F.col("id"), F.expr(f"pmod(hash(id), {n_partitions})").alias("bucket"))
        .groupBy("bucket")
        .agg(F.min("id").alias("label"))
        .collect()
    )
    labels = {int(r.bucket): int(r.label) for r in found}
    missing = set(range(n_partitions)) - labels.keys()
    if missing:
        raise RuntimeError(f"no placement label found for partitions {sorted(missing)}")
    return [labels[p] for p in range(n_partitions)]


def task_order(layout: Layout, previous_channels: Iterable[int]) -> list[int]:
    """The layout's channels in the order of their tasks: the channels new in `layout` first (each
    rebuilds its working set from the durable history in its first task: 2M keys, ~0.7 s at 1e7
    keys), then the others in the layout's order. Spark starts a stage's tasks in partition order;
    started last, a new channel's rebuild began once the carried channels had run on both cores,
    and the rescaling batch then waited for it alone. A first layout (no previous channels) keeps
    its own order."""
    previous = set(previous_channels)
    return sorted(layout.channels, key=lambda channel: channel in previous)  # stable: no previous, no change


def ordered_placement(layout: Layout, labels: list[int], order: list[int]) -> list[int]:
    """The placement label of each of the layout's dense indices, so that channel `order[p]`'s rows
    land in partition p (`labels[p]` is the label bucketed to partition p)."""
    if sorted(order) != sorted(layout.channels) or len(labels) != len(order):
        raise ValueError(f"task order {order} is not an order of the layout's channels {list(layout.channels)}")
    partition_of = {channel: p for p, channel in enumerate(order)}
    return [labels[partition_of[channel]] for channel in layout.channels]


def _partition_sql(layout: Layout) -> str:
    """SQL for the dense partition of `key_hash`: the first arc whose upper bound is >= it,
    i.e. `searchsorted(bounds, hash, side="left")` as in `Layout.lookup_partitions`.

    A flat CASE: Catalyst analyses a nested (binary-search) CASE tree ~5x slower, and that
    analysis runs on the driver in every batch, while 64 comparisons per pre-aggregated row
    cost the executors next to nothing."""
    bounds = [int(b) for b in layout.bounds]
    dense = [int(d) for d in layout.lookup_partitions(layout.bounds)]
    arms = " ".join(f"WHEN key_hash <= {bound}L THEN {partition}" for bound, partition in zip(bounds[:-1], dense[:-1]))
    return f"CASE {arms} ELSE {dense[-1]} END" if arms else str(dense[-1])


def route(deltas: DataFrame, layout: Layout, labels: list[int]) -> DataFrame:
    """Add each row's channel and placement label under `layout`, in the JVM.

    Built as SQL text parsed once: a tree of Column objects costs one Py4J call per node
    (about 0.5 s per batch for a 64-arc layout)."""
    channels = ", ".join(str(int(c)) for c in layout.channels)
    placement = ", ".join(f"{int(label)}L" for label in labels)
    columns = [c for c in deltas.columns if c not in ("channel", "label")]
    with_partition = deltas.selectExpr(
        *columns, f"({_partition_sql(layout)}) + 1 AS _partition"
    )  # element_at is 1-based
    return with_partition.selectExpr(
        *columns,
        f"CAST(element_at(array({channels}), _partition) AS INT) AS channel",
        f"CAST(element_at(array({placement}), _partition) AS BIGINT) AS label",
    )


@dataclass
class _CachedStore:
    store: StateStore
    epoch: int


@dataclass
class WorkerStores:
    """The channel stores open in one Python worker process, kept across batches.

    A store opened at epoch E is reused at E+1 only if its channel existed in both layouts:
    the migration changed it through its durable history, which `sync()` replays. Anything
    else (a new channel id, a worker that missed an epoch) reopens: from a clone of the seed
    another worker of this host left for the channel in this epoch if there is one
    (`pipelines.channel_seeds`), else rebuilt from the durable history, leaving a seed behind.
    """

    spec: StageSpec
    cached: dict[int, _CachedStore] = field(default_factory=dict)
    swept_epoch: int | None = None
    seeds: ChannelSeeds | None = None

    def __post_init__(self) -> None:
        # Seeds are RocksDB checkpoints in the host's local folder.
        if self.seeds is None and self.spec.store_kind == "rocks" and "://" not in self.spec.local_dir:
            self.seeds = ChannelSeeds(self.spec.local_dir)

    def _backend(self, epoch: int) -> StoreBackend:
        # Bytes: the operator's own codec encodes the values.
        return build_backend(self.spec.store_kind, BytesCodec(), self.spec.durable_uri, self._local(epoch))

    def _local(self, epoch: int) -> str:
        """This worker's folder of working copies for layout `epoch`."""
        return os.path.join(working_copies.worker_folder(self.spec.local_dir, os.getpid()), f"e{epoch}")

    def store_for(
        self, channel: int, epoch: int, previous_channels: frozenset[int], channels: frozenset[int] | None = None
    ) -> StateStore:
        if self.swept_epoch != epoch:
            self._sweep(epoch, previous_channels, channels)
        entry = self.cached.get(channel)
        reusable = entry is not None and (
            entry.epoch == epoch or (entry.epoch == epoch - 1 and channel in previous_channels)
        )
        if entry is not None and reusable and not self._carried_by_another(entry, channel, epoch):
            crossing = entry.epoch != epoch
            entry.epoch = epoch
            try:
                entry.store.sync()
            except FileNotFoundError:
                pass  # rebuilt below from the newest snapshot (see `_open`)
            else:
                if crossing:  # the first worker into the epoch: the others clone its copy
                    self._plant(entry.store, epoch)
                return entry.store
        if entry is not None:
            self._discard(self.cached.pop(channel))
        store = self._open(channel, epoch)
        self.cached[channel] = _CachedStore(store, epoch)
        return store

    def _open(self, channel: int, epoch: int, attempts: int = 3) -> StateStore:
        """A working set cloned from the channel's seed, else rebuilt from the durable history (and
        then planted as the seed). The driver writes snapshots and prunes
        the history beside the running batches (`pipelines.streams.snapshots`): a file listed a
        moment ago may be gone when read (only a copy two snapshots behind can hit it); the next
        attempt lists again and starts from the newest snapshot."""
        working_copy = os.path.join(self._local(epoch), channel_dir_name(channel))
        cloned = self._open_clone(channel, epoch, working_copy)
        if cloned is not None:
            return cloned
        for attempt in range(attempts):
            try:
                store = self._backend(epoch).open(channel)
            except FileNotFoundError:
                if attempt == attempts - 1:
                    raise
                shutil.rmtree(working_copy, ignore_errors=True)
                continue
            if store.last_restore is not None:
                self._plant(store, epoch)  # rebuilt from the history: spare the other workers
            return store
        raise AssertionError("unreachable")

    def _carried_by_another(self, entry: _CachedStore, channel: int, epoch: int) -> bool:
        """Whether another worker already carried the channel into `epoch` (its seed is there) while
        this worker's copy is still at the epoch before: cloning that seed spares applying the
        migration again (at 1e7 keys, a receiver's ~800k keys)."""
        return entry.epoch == epoch - 1 and self.seeds is not None and self.seeds.seed_of(epoch, channel).is_dir()

    def _plant(self, store: StateStore, epoch: int) -> None:
        if self.seeds is not None and isinstance(store, RocksStore):
            self.seeds.plant(store, epoch)

    def _open_clone(self, channel: int, epoch: int, working_copy: str) -> StateStore | None:
        """The channel's working set cloned from this epoch's seed and synced; None if there is no
        seed, or it would not open (the clone is then removed: the caller rebuilds)."""
        if self.seeds is None or not self.seeds.clone(epoch, channel, working_copy):
            return None
        try:
            return self._backend(epoch).open(channel)
        except Exception as error:
            log.warning("channel %d: its seed did not open (%s); rebuilding from the history", channel, error)
            shutil.rmtree(working_copy, ignore_errors=True)
            return None

    def _sweep(self, epoch: int, previous_channels: frozenset[int], channels: frozenset[int] | None) -> None:
        """At a worker's first store and at each epoch change: close the stores this worker can never
        reuse (channels not in the layout; older epochs a migration may have changed), then delete every
        working copy no live worker holds (see `pipelines.working_copies`)."""
        for channel, entry in list(self.cached.items()):
            reusable = entry.epoch == epoch or (entry.epoch == epoch - 1 and channel in previous_channels)
            if not reusable or (channels is not None and channel not in channels):
                self._discard(self.cached.pop(channel))
        in_use = [path for e in self.cached.values() if (path := getattr(e.store, "local_path", None))]
        working_copies.sweep(self.spec.local_dir, os.getpid(), in_use)
        if self.seeds is not None:
            self.seeds.sweep(epoch)
        self.swept_epoch = epoch

    def _discard(self, entry: _CachedStore) -> None:
        if self.seeds is not None and isinstance(entry.store, RocksStore):
            self.seeds.wait(entry.store)  # its checkpoint reads the open database
        entry.store.close()
        local_path = getattr(entry.store, "local_path", None)
        if local_path:
            shutil.rmtree(local_path, ignore_errors=True)


_WORKER_STORES: dict[StageSpec, WorkerStores] = {}
_WORKER_WARM = False


def warm_worker() -> float | None:
    """A fresh Python worker's one-time start, done first and timed apart; None once warm.

    pyarrow imports pandas on its first conversion (~0.9 s on the reference machine): left to
    happen inside the first rebuild, it would read as a slow restore of whatever snapshot came
    first, and the snapshot policy would learn a restore rate ten times too slow. Timed here,
    it is the recovery model's fixed part (`elasticity.snapshots.recovery`)."""
    global _WORKER_WARM
    if _WORKER_WARM:
        return None
    started = time.perf_counter()
    import pandas  # noqa: F401  (what pyarrow's first conversion would import)

    pa.array([0]).to_numpy()
    _WORKER_WARM = True
    return time.perf_counter() - started


def worker_stores(spec: StageSpec) -> WorkerStores:
    return _WORKER_STORES.setdefault(spec, WorkerStores(spec))


ReportKey = tuple[int, int]
"""(batch id, channel): a task that runs again replaces its report instead of adding one."""


class ChannelReports(AccumulatorParam):
    """Accumulates {(batch id, channel): ChannelMetrics}; the last report of a task wins."""

    def zero(self, value: dict[ReportKey, ChannelMetrics]) -> dict[ReportKey, ChannelMetrics]:
        return {}

    def addInPlace(
        self, value1: dict[ReportKey, ChannelMetrics], value2: dict[ReportKey, ChannelMetrics]
    ) -> dict[ReportKey, ChannelMetrics]:
        value1.update(value2)
        return value1


def state_bytes(store: StateStore) -> int | None:
    """RocksDB's own estimate (SST files + memtables); None for stores that do not know."""
    db = getattr(store, "db", None)
    if db is None:
        return None
    return sum(
        db.property_int_value(p) or 0 for p in ("rocksdb.total-sst-files-size", "rocksdb.cur-size-all-mem-tables")
    )
