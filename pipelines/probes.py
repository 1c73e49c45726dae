"""eSault probes: per-channel latency markers sent through the input topic.

Every PROBE_PERIOD the emitter sends one probe per channel. A probe's routing key is a key the
current layout sends to that channel, so the probe waits in the same queue and the same task as
that channel's records; the elastic stage reports `now - sent_ms` when it has processed the
channel's batch. Probes carry the Kafka key `PROBE_KAFKA_KEY`, which parsers set apart, so they
never reach user results.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F

from elasticity.hashing import hash_strings
from elasticity.layout import Layout

PROBE_KAFKA_KEY = b"__esp_probe__"
_CANDIDATES_PER_ROUND = 4096


def is_probe() -> Column:
    """True on the Kafka rows that are probes: the one test every parser and the stage share."""
    return F.col("key").isNotNull() & (F.col("key") == F.lit(PROBE_KAFKA_KEY))


@dataclass(frozen=True)
class Probe:
    """One probe record's payload."""

    channel: int
    routing_key: str
    sent_ms: int
    epoch: int

    def to_json(self) -> bytes:
        return json.dumps(
            {"channel": self.channel, "routing_key": self.routing_key, "sent_ms": self.sent_ms, "epoch": self.epoch}
        ).encode()


def probe_keys(layout: Layout) -> dict[int, str]:
    """For each channel of the layout, one key the layout routes to it (deterministic)."""
    wanted = set(layout.channels)
    found: dict[int, str] = {}
    start = 0
    while wanted - found.keys():
        candidates = [f"__probe_{i}" for i in range(start, start + _CANDIDATES_PER_ROUND)]
        owners = layout.lookup(hash_strings(candidates))
        for candidate, owner in zip(candidates, owners.tolist()):
            if owner in wanted and owner not in found:
                found[owner] = candidate
        start += _CANDIDATES_PER_ROUND
        if start > 10_000_000:  # a channel owning ~nothing of the ring would loop forever
            raise ValueError(f"no probe key found for channels {sorted(wanted - found.keys())}")
    return found


def make_probes(layout: Layout, keys: dict[int, str], now_ms: int | None = None) -> list[Probe]:
    sent = int(time.time() * 1000) if now_ms is None else now_ms
    return [Probe(channel, keys[channel], sent, layout.epoch) for channel in sorted(keys)]


def latency_percentiles(latencies_ms: list[float]) -> dict[str, float]:
    """p50/p95/p99/max of a list of latencies (empty → zeros)."""
    if not latencies_ms:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    values = np.asarray(latencies_ms, dtype=float)
    return {
        "p50": float(np.percentile(values, 50)),
        "p95": float(np.percentile(values, 95)),
        "p99": float(np.percentile(values, 99)),
        "max": float(values.max()),
    }
