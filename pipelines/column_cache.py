"""Column expressions every batch uses, built once per JVM instead of once per batch.

Building a Column costs a Py4J round trip per node (`F.col`, `F.lit`, every operator), and a
stream's driver builds its batch's DataFrames again in every micro-batch: the probe checks and a
parser's reject reasons were ~400 of the ~610 round trips a word-count batch took before its
Spark job began (BENCHMARKS.md, section 1). A Column is an immutable, unresolved expression, so
one built once serves every batch, thread and DataFrame of the JVM that holds it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from pyspark import SparkContext

P = ParamSpec("P")
T = TypeVar("T")


def once_per_jvm(build: Callable[P, T]) -> Callable[P, T]:
    """`build(*args)` called once per Py4J gateway (the driver's JVM) and hashable arguments, its
    result returned after that.

    Keyed by the gateway itself: a new JVM in the same process (rare, in tests) gets new
    Columns, never ones whose JVM objects belong to a gateway that was shut down."""
    lock = threading.Lock()
    values_gateway: Any = None
    values: dict[tuple[Any, ...], T] = {}

    @functools.wraps(build)
    def cached(*args: P.args, **kwargs: P.kwargs) -> T:
        nonlocal values_gateway
        if kwargs:
            raise TypeError(f"{build.__name__} is cached by its positional arguments only")
        gateway = SparkContext._gateway  # noqa: SLF001 (PySpark keeps its gateway private)
        with lock:
            if values_gateway is not gateway:
                values.clear()
                values_gateway = gateway
            if args not in values:
                values[args] = build(*args)
            return values[args]

    return cached
