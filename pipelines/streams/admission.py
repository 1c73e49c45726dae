"""Admission control on the stream's driver: after each batch, seed 004's watermarks
(`elasticity.admission`) decide how many Kafka records the next batch may admit, and the query is
restarted with that `maxOffsetsPerTrigger` when the cap changes.

Spark fixes a Kafka source's limit when the query starts, so a new cap needs a new query on the
same checkpoint. When the old query stops, Spark may already have planned the next batch with the
old limit; a restart would replay that plan. `forget_unstarted_batch` removes such a plan from the
offsets log, and only when nothing of it happened: the batch never entered `foreachBatch` (the
driver refuses it while restarting) and no channel holds it. Spark then plans that batch id again,
under the new cap. Nothing is dropped or reordered: the records past the cap stay in Kafka.

The controller's memory (`AdmissionState`) is kept in the control folder, so a restarted driver
keeps its cap.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from elasticity.admission import AdmissionController, AdmissionDecision, AdmissionOptions, AdmissionState, BatchOutcome
from elasticity.state import Location
from pipelines.streams.metrics import BatchMetrics, checkpoint_batch_ids, planned_offsets

log = logging.getLogger(__name__)

STATE_FILE = "admission.json"


def initial_offsets(checkpoint: str, topic: str) -> dict[int, int] | None:
    """Where the query's Kafka source began on `topic` (its `sources/0/0`), None if unknown."""
    source = Location.of(checkpoint).child("sources", "0")
    if not source.exists("0"):
        return None
    # The Kafka source writes a version line ("v1", after a stray NUL byte), then its offsets.
    lines = source.read_raw("0").lstrip(b"\x00").decode().splitlines()
    began = json.loads(lines[-1]).get(topic)
    return None if began is None else {int(p): int(o) for p, o in began.items()}


def admitted_records(checkpoint: str, batch_id: int, topic: str) -> int | None:
    """Kafka records batch `batch_id` admitted from `topic`: its planned end offsets minus the
    previous batch's (for the first batch, minus where the source began); None when one is gone."""
    end = planned_offsets(checkpoint, batch_id, topic)
    start = initial_offsets(checkpoint, topic) if batch_id == 0 else planned_offsets(checkpoint, batch_id - 1, topic)
    if end is None or start is None:
        return None
    return sum(offset - start.get(partition, offset) for partition, offset in end.items())


def forget_unstarted_batch(checkpoint: str, holds: Callable[[int], bool]) -> int | None:
    """Remove the newest planned, uncommitted batch from the offsets log, so the next query plans
    it again; its id, or None if there is none. `holds(batch_id)` says whether any channel applied
    it: then the batch has begun, must be replayed as planned, and is kept (None)."""
    location = Location.of(checkpoint)
    offsets = location.child("offsets")
    planned, committed = checkpoint_batch_ids(offsets), checkpoint_batch_ids(location.child("commits"))
    if not planned or (committed and committed[-1] >= planned[-1]):
        return None
    batch_id = planned[-1]
    if holds(batch_id):
        log.warning("admission: batch %d was begun by a channel: replayed as planned, under the old cap", batch_id)
        return None
    offsets.delete_file(str(batch_id))
    if offsets.exists(f".{batch_id}.crc"):
        offsets.delete_file(f".{batch_id}.crc")
    return batch_id


MAINTENANCE_PHASES = ("compact", "rescale")
"""Batch phases whose time does not grow with the records admitted (the swap of a compaction
staged in the background, a rescale's migration at the batch's start): left out of the duration
admission control judges, which would otherwise lower the cap for them."""


def batch_outcome(metrics: BatchMetrics, admitted: int) -> BatchOutcome:
    """What admission control judges of a finished batch: its duration without maintenance."""
    maintenance_ms = sum(metrics.phase_ms.get(phase, 0.0) for phase in MAINTENANCE_PHASES)
    duration_s = max(0.0, metrics.batch_ms - maintenance_ms) / 1000
    return BatchOutcome(batch_id=metrics.batch_id, duration_s=duration_s, admitted_records=admitted)


@dataclass
class AdmissionGate:
    """The driver's admission controller and its persisted state."""

    options: AdmissionOptions
    control_dir: str

    def __post_init__(self) -> None:
        self.controller = AdmissionController(self.options)
        self._location = Location.of(self.control_dir)
        self.state = self._load()

    @property
    def cap_records(self) -> int | None:
        return self.state.cap_records

    def after_batch(self, outcome: BatchOutcome) -> AdmissionDecision:
        """The decision after a finished batch; the new state is published before it is acted on."""
        state, decision = self.controller.decide(self.state, outcome)
        if state != self.state:
            self._location.ensure()
            self._location.publish_bytes(STATE_FILE, state.to_json().encode())
            self.state = state
        if decision.changed:
            log.warning("admission: %s", decision.reason)
        return decision

    def _load(self) -> AdmissionState:
        if not self._location.exists(STATE_FILE):
            return AdmissionState()
        return AdmissionState.from_json(self._location.read_bytes(STATE_FILE).decode())
