"""A stream's recent health, read back from its asset's observations, and the verdicts on it.

The stream's run observes its asset every few seconds (`orchestration.streams.assets`); the
numbers live under stable metadata keys. `samples_from_records` turns observation records into
`StreamSample`s; `evaluate_slo` and `evaluate_dead_letter_rate` are pure, for the asset checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The observation's metadata keys (pipelines.streams.service.Observation.as_metadata).
INPUT_KEY = "input_rows_per_s"
PROCESSED_KEY = "processed_rows_per_s"
LAG_KEY = "lag_records"
P99_KEY = "probe_latency_p99_ms"
CHANNELS_KEY = "channels"
EPOCH_KEY = "layout_epoch"


@dataclass(frozen=True)
class StreamSample:
    """One observation of a stream (wall-clock seconds)."""

    at: float
    input_rps: float
    processed_rps: float
    lag_records: float
    p99_ms: float
    channels: int
    epoch: int


def _number(metadata: Mapping[str, Any], key: str) -> float:
    value = metadata.get(key)
    value = getattr(value, "value", value)  # a Dagster MetadataValue, or a plain number
    return float(value) if isinstance(value, int | float) else 0.0


def sample_from_metadata(at: float, metadata: Mapping[str, Any]) -> StreamSample:
    return StreamSample(
        at=at,
        input_rps=_number(metadata, INPUT_KEY),
        processed_rps=_number(metadata, PROCESSED_KEY),
        lag_records=_number(metadata, LAG_KEY),
        p99_ms=_number(metadata, P99_KEY),
        channels=int(_number(metadata, CHANNELS_KEY)),
        epoch=int(_number(metadata, EPOCH_KEY)),
    )


def samples_from_records(records: Iterable[Any]) -> list[StreamSample]:
    """Oldest first, from Dagster `EventLogRecord`s of observations."""
    samples = [
        sample_from_metadata(record.timestamp, record.asset_observation.metadata)
        for record in records
        if record.asset_observation is not None
    ]
    return sorted(samples, key=lambda s: s.at)


def recent_samples(instance: Any, key: Any, window_s: float, now: float, limit: int = 2000) -> list[StreamSample]:
    """The asset's observations of the last `window_s` seconds, oldest first."""
    from dagster import AssetRecordsFilter

    result = instance.fetch_observations(AssetRecordsFilter(asset_key=key, after_timestamp=now - window_s), limit=limit)
    return samples_from_records(result.records)


@dataclass(frozen=True)
class Rescale:
    """A layout change seen between two observations."""

    at: float
    channels_before: int
    channels_after: int


def rescales(samples: Sequence[StreamSample]) -> list[Rescale]:
    """Where the layout epoch changed between consecutive samples (the markers of the dashboard)."""
    return [
        Rescale(after.at, before.channels, after.channels)
        for before, after in zip(samples, samples[1:], strict=False)
        if after.epoch != before.epoch
    ]


@dataclass(frozen=True)
class Verdict:
    """An asset check's outcome: passed, one sentence, the numbers behind it."""

    passed: bool
    description: str
    numbers: dict[str, float]


def evaluate_slo(samples: Sequence[StreamSample], slo_ms: float, max_breach_share: float) -> Verdict:
    """Passes when at most `max_breach_share` of the window's samples had a p99 above the SLO."""
    if not samples:
        return Verdict(False, "no observations in the window: is the stream running?", {"samples": 0.0})
    breaches = sum(1 for s in samples if s.p99_ms > slo_ms)
    share = breaches / len(samples)
    worst = max(s.p99_ms for s in samples)
    numbers = {
        "samples": float(len(samples)),
        "breaches": float(breaches),
        "breach_share": round(share, 4),
        "worst_p99_ms": worst,
        "slo_ms": slo_ms,
    }
    sentence = (
        f"p99 above the SLO of {slo_ms:,.0f} ms in {breaches} of {len(samples)} observations "
        f"({share:.0%}, allowed {max_breach_share:.0%}); worst p99 {worst:,.0f} ms"
    )
    return Verdict(share <= max_breach_share, sentence, numbers)


def evaluate_dead_letter_rate(dead_letters: int, input_records: int, max_rate: float, min_input: int) -> Verdict:
    """Passes when dead letters / input records stays at or below `max_rate` (too little input: passes)."""
    rate = dead_letters / input_records if input_records else 0.0
    numbers = {"dead_letters": float(dead_letters), "input_records": float(input_records), "rate": round(rate, 6)}
    if input_records < min_input:
        return Verdict(True, f"only {input_records} input records in the window (< {min_input}): no rate", numbers)
    sentence = f"{dead_letters} dead letters per {input_records} input records = {rate:.3%} (allowed {max_rate:.3%})"
    return Verdict(rate <= max_rate, sentence, numbers)
