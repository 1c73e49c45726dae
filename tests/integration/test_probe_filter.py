"""The parsers' probe filter on real Spark: it keeps what it always kept, and it reads a row's
value as JSON only when the row is keyed as a probe.

The second part guards a 3.7x slower parse: written as an AND, the filter's repeated JSON
lookups were common subexpressions, which Spark's generated code evaluates for every row before
the AND short-circuits, so every input line was parsed as JSON."""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.integration


def _rows(spark, values: list[tuple[bytes | None, bytes]]):
    return spark.createDataFrame(values, "key binary, value binary")


def test_valid_probes_leave_the_parsers_and_everything_else_stays(spark) -> None:
    from pipelines.probes import PROBE_KAFKA_KEY, Probe, without_valid_probes

    probe = Probe(channel=0, routing_key="k", sent_ms=1_700_000_000_000, epoch=0).to_json()
    values = [
        (None, b"a plain line"),
        (b"some key", b'{"routing_key": "k", "sent_ms": 1}'),  # JSON like a probe, not keyed as one
        (PROBE_KAFKA_KEY, probe),
        (PROBE_KAFKA_KEY, b'{"routing_key": "k", "sent_ms": "abc"}'),
        (PROBE_KAFKA_KEY, json.dumps({"sent_ms": 1}).encode()),
        (PROBE_KAFKA_KEY, b"not json"),
    ]

    kept = without_valid_probes(_rows(spark, values)).collect()

    assert sorted(row.value for row in kept) == sorted(value for key, value in values if value != probe)


def _methods(code: str) -> dict[str, str]:
    """The generated class's methods by name (each body up to the next method)."""
    pieces = re.split(r"\n/\* \d+ \*/\s+(?=(?:private|protected|public) )", code)
    found = {}
    for piece in pieces:
        name = re.match(r"(?:private|protected|public) [\w.\[\]]+ (\w+)\(", piece)
        if name:
            found[name.group(1)] = piece
    return found


def test_rows_not_keyed_as_probes_are_not_read_as_json(spark) -> None:
    from pyspark.sql import functions as F

    from pipelines.probes import without_valid_probes

    # Computed columns, so that nothing is constant-folded away.
    rows = spark.range(3).select(
        F.when(F.col("id") < 0, F.lit(b"k")).alias("key"),
        F.concat(F.lit("line "), F.col("id").cast("string")).cast("binary").alias("value"),
    )
    plan = without_valid_probes(rows)._jdf.queryExecution().executedPlan()
    code = spark._jvm.org.apache.spark.sql.execution.debug.package.codegenString(plan)
    methods = _methods(code)

    # A JSON lookup hands the value to its evaluator with setJson: the probe branch does, but no
    # eagerly evaluated common subexpression (a `*_subExpr_*` method) may.
    assert "setJson" in code
    eager = {name: body for name, body in methods.items() if "subExpr" in name}
    assert [name for name, body in eager.items() if "setJson" in body] == []
