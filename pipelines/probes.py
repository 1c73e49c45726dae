"""eSault probes: per-channel latency markers sent through the input topic.

Every PROBE_PERIOD the emitter sends one probe per channel. A probe's routing key is a key the
current layout sends to that channel, so the probe waits in the same queue and the same task as
that channel's records; the elastic stage reports `now - sent_ms` when it has processed the
channel's batch. Probes carry the Kafka key `PROBE_KAFKA_KEY`, which parsers set apart, so they
never reach user results. A record with that key that is not a valid probe (`is_valid_probe`)
is dead-lettered (`Reason.INVALID_PROBE`), never dropped.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from elasticity.hashing import hash_strings
from elasticity.layout import Layout
from pipelines.column_cache import once_per_jvm
from pipelines.dead_letters import MAX_EPOCH_MS, MAX_FIELD_CHARS, Check, Reason
from pipelines.streams.names import FIRST_STAGE

PROBE_KAFKA_KEY = b"__esp_probe__"
_CANDIDATES_PER_ROUND = 4096


@once_per_jvm
def is_probe() -> Column:
    """True on the Kafka rows that are probes: the one test every parser and the stage share."""
    return F.col("key").isNotNull() & (F.col("key") == F.lit(PROBE_KAFKA_KEY))


@once_per_jvm
def probe_routing_key() -> Column:
    """A probe row's routing key (null when absent)."""
    return F.get_json_object(F.col("value").cast("string"), "$.routing_key")


@once_per_jvm
def probe_stage() -> Column:
    """The elastic stage a probe row measures (`FIRST_STAGE` when it names none)."""
    return F.coalesce(F.get_json_object(F.col("value").cast("string"), "$.stage"), F.lit(FIRST_STAGE))


@once_per_jvm
def probe_sent_ms() -> Column:
    """A probe row's send time, epoch ms (null when absent or not an integer)."""
    return F.expr("try_cast(get_json_object(CAST(value AS STRING), '$.sent_ms') AS BIGINT)")


@once_per_jvm
def is_valid_probe() -> Column:
    """True on the probe rows the stage takes: UTF-8 JSON with a routing key (any JSON value,
    taken as text, of at most MAX_FIELD_CHARS characters) and an integer sent_ms in
    [0, MAX_EPOCH_MS); never null."""
    key, sent = probe_routing_key(), probe_sent_ms()
    valid = (
        F.is_valid_utf8(F.col("value"))
        & key.isNotNull()
        & (F.length(key) <= MAX_FIELD_CHARS)
        & sent.between(0, MAX_EPOCH_MS - 1)
    )
    # The payload is read only in the probe branch of a CASE: as the right side of an AND, its
    # repeated JSON lookups were common subexpressions that Spark evaluates before the AND
    # short-circuits, i.e. it parsed every input line as JSON (~1.5 s of a 500k-line batch).
    return F.when(is_probe(), F.coalesce(valid, F.lit(False))).otherwise(F.lit(False))


def without_valid_probes(raw: DataFrame) -> DataFrame:
    """The rows a parser sees: all but the valid probes (the stage takes those); an invalid
    probe stays, for `invalid_probe_check` to reject."""
    return raw.where(_not_a_valid_probe())


@once_per_jvm
def _not_a_valid_probe() -> Column:
    return ~is_valid_probe()


@once_per_jvm
def is_valid_probe_of(stage: str) -> Column:
    """True on the valid probes that measure elastic stage `stage`."""
    return is_valid_probe() & (probe_stage() == stage)


@once_per_jvm
def invalid_probe_check() -> Check:
    """The first check of every parser: a probe-keyed row left here is not a valid probe."""
    return (is_probe(), Reason.INVALID_PROBE)


@dataclass(frozen=True)
class Probe:
    """One probe record's payload."""

    channel: int
    routing_key: str
    sent_ms: int
    epoch: int
    stage: str = FIRST_STAGE
    """The elastic stage whose channel the probe measures (a later stage's probe waits for the
    stages before it in the same batch: its latency is the latency through that stage)."""

    def to_json(self) -> bytes:
        payload: dict[str, object] = {
            "channel": self.channel,
            "routing_key": self.routing_key,
            "sent_ms": self.sent_ms,
            "epoch": self.epoch,
        }
        if self.stage != FIRST_STAGE:  # a one-stage stream's probes stay as they always were
            payload["stage"] = self.stage
        return json.dumps(payload).encode()


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


def make_probes(
    layout: Layout, keys: dict[int, str], now_ms: int | None = None, stage: str = FIRST_STAGE
) -> list[Probe]:
    sent = int(time.time() * 1000) if now_ms is None else now_ms
    return [Probe(channel, keys[channel], sent, layout.epoch, stage) for channel in sorted(keys)]


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
