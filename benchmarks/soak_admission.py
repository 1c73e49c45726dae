"""What admission control did in a soaked stream (`esp soak --admission-high`): read from the
stream's metrics topic as it is written (the soak tails it like its input topics: an endurance
run's retention would delete what a read at the end wants), one record per batch.

A batch replayed after a kill publishes its metrics again; the last record of a batch counts.
The figures say whether admission engaged under the soak's faults (`capped_batches`), how often
the cap changed between consecutive batches (`cap_changes`, as `esp bench admission` counts
them), which rules decided, and how many query restarts set a new cap.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class AdmissionLog:
    """One stream's admission decisions, batch by batch."""

    decisions: dict[int, tuple[int | None, str | None, float | None]] = field(default_factory=dict)
    """batch id -> (the cap set after it, the rule that decided, the query restart before it in ms)."""
    malformed: int = 0
    """Records of the metrics topic that are no BatchMetrics (skipped)."""

    def take(self, raw: bytes | None) -> None:
        """One record of the metrics topic."""
        from pipelines.streams.metrics import BatchMetrics, MalformedMetrics

        try:
            metrics = BatchMetrics.from_json(raw)  # type: ignore[arg-type]  # a tombstone (None) is malformed
        except MalformedMetrics:
            self.malformed += 1
            return
        self.decisions[metrics.batch_id] = (metrics.admission_cap, metrics.admission_rule, metrics.query_restart_ms)

    def summary(self) -> dict[str, object]:
        ordered = [self.decisions[b] for b in sorted(self.decisions)]
        caps = [cap for cap, _, _ in ordered]
        capped = [cap for cap in caps if cap is not None]
        return {
            "batches": len(ordered),
            "capped_batches": len(capped),
            "cap_changes": sum(1 for before, after in zip(caps, caps[1:]) if before != after),
            "min_cap": min(capped, default=None),
            "max_cap": max(capped, default=None),
            "rules": dict(sorted(Counter(rule for _, rule, _ in ordered if rule is not None).items())),
            "query_restarts": sum(1 for _, _, restart_ms in ordered if restart_ms),
            "malformed_metrics": self.malformed,
        }
