"""The records cap's side of a batch boundary: after each batch, the cap the next batch should run
under is decided (admission control's, `pipelines.streams.admission`, and the per-channel cap, which
follows the channels a rescale leaves); a changed cap refuses the following batches until the runner
has swapped the query for one started with the new cap, and the next batch reports the swap's pause.

The flags here are shared by two threads: the query's batch thread (which decides and refuses) and
the runner's swap thread (which waits for a change and restarts the query)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from pipelines.streams.admission import AdmissionGate, admitted_records, batch_outcome
from pipelines.streams.metrics import BatchMetrics


@dataclass
class CapSwitch:
    """One stream's admission decisions and the hand-off of a new cap to the query swap."""

    gate: AdmissionGate | None
    checkpoint: str
    input_topic: str
    wanted_cap: Callable[[int], int | None]
    """The cap the next batch should run under after a batch on this many channels (None: none),
    read after the gate's decision; the stream's counts a waiting rescale request, which the next
    batch applies (`StreamRunner._next_batch_cap`)."""
    adjustable: bool = False
    """Whether the cap can change at all (admission control or a per-channel cap): if not, batches
    are neither measured nor refused here."""
    query_cap: int | None = None
    """The cap the running query was started with."""
    refusing: threading.Event = field(default_factory=threading.Event)
    """Set: batches are refused while the query is swapped for one with a new cap."""
    swapping: threading.Event = field(default_factory=threading.Event)
    """Set: the query ends for a new cap, not for a failure."""
    changed: threading.Event = field(default_factory=threading.Event)
    """Set: a swap is due (the swap thread clears it)."""
    decided_by_batch: int = -1
    """The batch that decided the new cap: it must be committed before the query stops."""
    restart_ms: float | None = None
    """The last swap's pause, reported by the batch that follows it."""
    new_query: bool = False
    """The next batch is a new query's first."""

    def after_batch(self, metrics: BatchMetrics) -> None:
        """Decide the next batch's cap; a changed cap refuses later batches until the query is swapped."""
        metrics.query_restart_ms, self.restart_ms = self.restart_ms, None
        disturbed, self.new_query = self.new_query, False
        # Measured whatever the cap: the elasticity collector reads records per Kafka record from
        # each batch's own pair (records, admitted), which no tick's timing can skew.
        metrics.admitted_records = admitted_records(self.checkpoint, metrics.batch_id, self.input_topic)
        if not self.adjustable:
            return
        if self.gate is not None:
            self._admission_decision(metrics, disturbed)
        if self.wanted_cap(metrics.channels) != self.query_cap:
            # Set before this batch returns, so the next one cannot begin under the old cap.
            self.decided_by_batch = metrics.batch_id
            self.refusing.set()
            self.swapping.set()
            self.changed.set()

    def _admission_decision(self, metrics: BatchMetrics, disturbed: bool) -> None:
        assert self.gate is not None
        admitted = metrics.admitted_records
        if admitted is None or disturbed:
            # The first batch of a new query pays its start-up (planning, cold caches): like a
            # window disturbed by a rescale, it is no evidence of the load. The cap holds.
            metrics.admission_cap = self.gate.cap_records
            return
        decision = self.gate.after_batch(batch_outcome(metrics, admitted))
        metrics.admission_cap, metrics.admission_rule = decision.cap_records, decision.rule

    def wait_for_change(self, timeout_s: float) -> bool:
        """True (and the change taken) if a new cap was decided within `timeout_s`."""
        if self.changed.wait(timeout_s):
            self.changed.clear()
            return True
        return False
