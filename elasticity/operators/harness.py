"""An in-process elastic stage: an operator over a sequence of batches on N channels, with
rescales between batches through the real `Migrator` and crash-after-commit replays.

Rows are routed as the Spark runner routes them: the key's hash (`elasticity.hashing`, Spark's
xxhash64) looked up in the committed layout (`Layout.lookup`); each channel's store is a
`MemoryBackend` store of bytes whose history is durable under a folder, so a "crash" (dropping
every in-memory store) is survived exactly as a real restart is. Property tests and the Spark
runner's tests share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from elasticity.layout import Layout
from elasticity.migration.protocol import Migrator
from elasticity.migration.registry import LayoutRegistry
from elasticity.operators.api import HASH_COLUMN, KeyedOperator
from elasticity.operators.runner import ChannelResult, ChannelRunner, with_hashes
from elasticity.state.backend import MemoryBackend
from elasticity.state.codecs import BytesCodec
from elasticity.state.files import Location

RescaleOp = Literal["split", "merge", "scale_to"]


@dataclass(frozen=True)
class Batch:
    """One micro-batch's rows and its recorded times (ms): what Spark's offset log keeps."""

    rows: pa.Table
    watermark_ms: int = 0
    processing_ms: int = 0


@dataclass
class BatchResult:
    """Every channel's outputs of one batch, concatenated in channel order."""

    batch_id: int
    output: pa.Table
    rejected: pa.Table
    replayed_channels: list[int] = field(default_factory=list)


class Harness:
    """Runs one operator on an elastic stage whose state lives under `root`."""

    def __init__(self, operator: KeyedOperator[Any], root: str | Path, channels: int = 2) -> None:
        self.operator = operator
        self.root = Location.of(str(root))
        self.registry = LayoutRegistry(self.root)
        self.registry.initialize(Layout.uniform(channels))
        self._open()
        # Reopening existing state (a new deployment) continues after its last committed batch.
        self.first_batch_id = 1 + max(self.backend.open(c).version.batch for c in self.layout.channels)
        self.batches: list[Batch] = []
        """Every batch run so far; batch id = `first_batch_id` + index."""

    def _open(self) -> None:
        self.backend = MemoryBackend(BytesCodec(), durable=self.root.path)
        self.migrator = Migrator(self.root, self.backend, max_workers=1)
        self._runners: dict[int, ChannelRunner[Any]] = {}

    @property
    def layout(self) -> Layout:
        return self.registry.committed()

    def runner(self, channel: int) -> ChannelRunner[Any]:
        if channel not in self._runners:
            self._runners[channel] = ChannelRunner(self.operator, self.backend.open(channel))
        return self._runners[channel]

    # ---- batches --------------------------------------------------------------------------
    def run(self, batch: Batch, channels: set[int] | None = None) -> BatchResult:
        """Run the next batch on every channel (or only `channels`: the others "crashed" before
        running it, so the batch must be run again with `rerun`)."""
        self.batches.append(batch)
        return self._execute(self.last_batch_id, channels)

    def rerun(self, batch_id: int | None = None, *, crash: bool = True) -> BatchResult:
        """Run a batch again (the last by default) as Spark does after a failure; with `crash`,
        every in-memory store is dropped first, so channels restart from durable history."""
        if crash:
            self.crash()
        return self._execute(self.last_batch_id if batch_id is None else batch_id, None)

    @property
    def last_batch_id(self) -> int:
        return self.first_batch_id + len(self.batches) - 1

    def crash(self) -> None:
        """Lose every in-memory working set and timer index (a process restart)."""
        self.backend.close()
        self._open()

    def _execute(self, batch_id: int, only: set[int] | None) -> BatchResult:
        batch = self.batches[batch_id - self.first_batch_id]
        rows = with_hashes(batch.rows, self.operator.key_column)
        owners = self.layout.lookup(rows[HASH_COLUMN].to_numpy())
        outputs: list[pa.Table] = []
        rejected: list[pa.Table] = []
        replayed: list[int] = []
        for channel in self.layout.channels:
            if only is not None and channel not in only:
                continue
            part = rows.filter(pa.array(owners == channel))
            result: ChannelResult = self.runner(channel).run(batch_id, part, batch.watermark_ms, batch.processing_ms)
            outputs.append(result.output)
            if result.rejected.num_columns:
                rejected.append(result.rejected)
            if result.replayed:
                replayed.append(channel)
        output = pa.concat_tables(outputs) if outputs else self.operator.empty_output()
        late = pa.concat_tables(rejected) if rejected else pa.table({})
        return BatchResult(batch_id, output, late, replayed)

    # ---- rescaling ------------------------------------------------------------------------
    def rescale(self, op: RescaleOp, arg: int) -> Layout:
        """Split or merge channel `arg`, or scale to `arg` channels, through the real Migrator."""
        old = self.layout
        if op == "split":
            new = old.split(arg)
        elif op == "merge":
            new = old.merge(arg)
        elif arg > old.n_channels:
            new = old.scale_out(arg - old.n_channels)
        elif arg < old.n_channels:
            new = old.scale_in(old.n_channels - arg)
        else:
            return old
        self.migrator.migrate(new.renumbered(self.registry.next_epoch()))
        for gone in set(old.channels) - set(self.layout.channels):
            self._runners.pop(gone, None)
        return self.layout

    # ---- inspection -----------------------------------------------------------------------
    def entries(self) -> pa.Table:
        """Every channel's raw entries (hash, key, value), state and timers alike."""
        tables = [self.backend.open(c).entries() for c in self.layout.channels]
        return pa.concat_tables(tables)

    def misplaced_keys(self) -> list[str]:
        """Entries stored on a channel that is not their hash's owner (must stay empty)."""
        layout = self.layout
        wrong = []
        for channel in layout.channels:
            entries = self.backend.open(channel).entries()
            owners = layout.lookup(entries["hash"].to_numpy())
            wrong += [k for k, o in zip(entries["key"].to_pylist(), owners) if o != channel]
        return wrong

    def close(self) -> None:
        self.backend.close()
