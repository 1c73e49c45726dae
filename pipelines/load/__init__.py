"""Synthetic load for esp jobs: word-count lines or ad events, produced to Kafka at a target rate.

- `LoadSpec`: what to produce (profile, rates, keys, record kind, topic, seed, processes).
- `run_load(spec, bootstrap)`: a paced run over the spec's rate profile -> `LoadReport`.
- `preload(spec, bootstrap, records)`: exactly N records as fast as possible -> `LoadReport`.
- `expected_counts(spec, records)`: the exact counts of the first N records of (spec, seed).
- `rate_profile(spec)`: the target rate over time (eSault, square, sine, step, constant).
"""

from pipelines.load.producer import LoadError, LoadProgress, LoadReport, preload, run_load
from pipelines.load.profiles import RateProfile, rate_profile
from pipelines.load.records import RecordSource, ad_catalogue, expected_counts
from pipelines.load.spec import LoadSpec

__all__ = [
    "LoadError",
    "LoadProgress",
    "LoadReport",
    "LoadSpec",
    "RateProfile",
    "RecordSource",
    "ad_catalogue",
    "expected_counts",
    "preload",
    "rate_profile",
    "run_load",
]
