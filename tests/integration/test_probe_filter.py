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


def _round_trips(build) -> int:
    """Py4J commands `build()` sends to the JVM, but the releases of collected Python proxies (Py4J
    sends those whenever Python's garbage collector runs: now and then ~100 within one build)."""
    from py4j import protocol
    from py4j.clientserver import ClientServerConnection

    release = protocol.MEMORY_COMMAND_NAME + protocol.MEMORY_DEL_SUBCOMMAND_NAME
    sent = 0
    send = ClientServerConnection.send_command

    def counting(self, command):
        nonlocal sent
        sent += not command.startswith(release)
        return send(self, command)

    ClientServerConnection.send_command = counting
    try:
        build()
    finally:
        ClientServerConnection.send_command = send
    return sent


def test_a_batch_builds_its_probe_checks_and_parse_columns_once(spark) -> None:
    """Every micro-batch builds its DataFrames again on the driver; the Column trees of the probe
    checks and the word count's parse were ~400 of its ~610 Py4J round trips, and are now built once."""
    from pipelines.elastic_stage import probe_rows
    from pipelines.jobs.wordcount import parse_lines

    rows = _rows(spark, [(None, b"a line")])
    parse_lines(rows), probe_rows(rows)  # the first batch builds them

    # What is left per batch: the DataFrame steps themselves (about ten round trips each).
    assert _round_trips(lambda: parse_lines(rows)) < 40
    assert _round_trips(lambda: probe_rows(rows)) < 30
