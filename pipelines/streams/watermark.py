"""The event-time watermark of a stream, recorded per batch so a replayed batch reuses it.

`wm-<batch>.json` holds the watermark the batch ran under and the max event time seen through
it. A batch that finds its own file is a replay and gets the same watermark; otherwise the
watermark is the latest recorded max event time minus the allowed lateness.
"""

from __future__ import annotations

import json

from elasticity.state import Location


class WatermarkLog:
    def __init__(self, folder: str, lateness_ms: int) -> None:
        self.location = Location.of(folder)
        self.location.ensure()
        self.lateness_ms = lateness_ms

    @staticmethod
    def _name(batch_id: int) -> str:
        return f"wm-{batch_id:012d}.json"

    def watermark_for(self, batch_id: int) -> int | None:
        own = self._name(batch_id)
        if self.location.exists(own):
            return self.location.read_json(own)["watermark_ms"]
        earlier = [n for n in self.location.names() if n.startswith("wm-") and n < own]
        if not earlier:
            return None
        max_event = self.location.read_json(earlier[-1])["max_event_ms"]
        return None if max_event is None else max_event - self.lateness_ms

    def newest_watermark(self) -> int | None:
        """The watermark the newest recorded batch ran under (None: no batch recorded one)."""
        recorded = sorted(n for n in self.location.names() if n.startswith("wm-"))
        return self.location.read_json(recorded[-1])["watermark_ms"] if recorded else None

    def record(self, batch_id: int, watermark_ms: int | None, batch_max_event_ms: int | None) -> None:
        own = self._name(batch_id)
        earlier = [n for n in self.location.names() if n.startswith("wm-") and n < own]
        previous = self.location.read_json(earlier[-1])["max_event_ms"] if earlier else None
        candidates = [v for v in (previous, batch_max_event_ms) if v is not None]
        self.location.publish_bytes(
            own,
            json.dumps(
                {"watermark_ms": watermark_ms, "max_event_ms": max(candidates) if candidates else None}
            ).encode(),
        )
        for stale in earlier[:-10]:  # keep a short tail; only the newest matters
            self.location.delete_file(stale)
