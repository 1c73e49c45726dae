"""Keyed stateful operators on esp's elastic stages: the public operator API (`api`, `view`),
per-key timers and TTL kept in the channel's own state store (`timers`), the per-channel
runner with its replay contract (`runner`), built-in aggregates and windows, and an in-process
harness that rescales through the real `Migrator`. Pure Python (pyarrow, numpy): it runs in
Spark's Python workers without importing pyspark. See docs/operators.md."""

from elasticity.operators.aggregates import (
    Aggregate,
    ApproxDistinct,
    Count,
    IntSum,
    KeyedAggregate,
    Max,
    Mean,
    Min,
    Sum,
    TopK,
)
from elasticity.operators.api import FIRED_SCHEMA, HASH_COLUMN, Context, KeyedOperator, TimeDomain
from elasticity.operators.groups import KeyGroups, group_rows
from elasticity.operators.harness import Batch, BatchResult, Harness
from elasticity.operators.runner import ChannelResult, ChannelRunner, state_before
from elasticity.operators.timers import RESERVED_PREFIX, TIMER_PREFIX
from elasticity.operators.view import StateView
from elasticity.operators.windows import Session, Sliding, Tumbling, WindowedAggregate, Windowing

__all__ = [
    "Aggregate",
    "ApproxDistinct",
    "Batch",
    "BatchResult",
    "ChannelResult",
    "ChannelRunner",
    "Context",
    "Count",
    "FIRED_SCHEMA",
    "HASH_COLUMN",
    "Harness",
    "IntSum",
    "KeyGroups",
    "group_rows",
    "KeyedAggregate",
    "KeyedOperator",
    "Max",
    "Mean",
    "Min",
    "RESERVED_PREFIX",
    "Session",
    "Sliding",
    "StateView",
    "Sum",
    "TIMER_PREFIX",
    "TimeDomain",
    "TopK",
    "Tumbling",
    "WindowedAggregate",
    "Windowing",
    "state_before",
]
