"""`esp backfill` over three days of bronze (written here in the stream's exact layout):
three partitions materialize in the Dagster instance, their counts equal an independent
Python count, and re-running a day changes nothing."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import pytest

from orchestration.names import daily_counts_asset_key
from pipelines.streams.names import bronze_table_path, daily_table_path

pytestmark = pytest.mark.integration

TODAY = dt.datetime.now(dt.UTC).date()
DAYS = [TODAY - dt.timedelta(days=n) for n in (5, 4, 3)]
LINES = {
    DAYS[0]: ["the cat sat", "the dog", "  cat  cat "],
    DAYS[1]: ["a b c", "a b", "a", "zebra"],
    DAYS[2]: ["the end", "end end end", "ünïcode wörds wörds"],
}
# Batches as the stream would have cut them: day 2 spread over two batches.
BATCHES = {DAYS[0]: [0], DAYS[1]: [1, 2], DAYS[2]: [3]}


def write_bronze(spark, bronze: Path) -> None:
    """Bronze rows exactly as `ElasticStream._archive` writes them for word count."""
    from pyspark.sql import functions as F

    rows = []
    for day, lines in LINES.items():
        batches = BATCHES[day]
        for i, line in enumerate(lines):
            ts = dt.datetime.combine(day, dt.time(12, i), tzinfo=dt.UTC)
            rows.append((line, "words", i % 2, i, ts, batches[i % len(batches)]))
    frame = spark.createDataFrame(
        rows, "line string, topic string, partition int, offset long, timestamp timestamp, batch_id long"
    )
    frame = frame.withColumn("date", F.date_format("timestamp", "yyyy-MM-dd"))
    frame.write.mode("overwrite").option("partitionOverwriteMode", "dynamic").partitionBy("date", "batch_id").parquet(
        str(bronze)
    )


def expected_counts(day: dt.date) -> dict[str, int]:
    return dict(Counter(word for line in LINES[day] for word in line.split()))


def daily_counts(spark, table: Path, day: dt.date) -> dict[str, int]:
    return {r.word: r["count"] for r in spark.read.parquet(str(table / f"date={day.isoformat()}")).collect()}


def partition_files(table: Path) -> dict[str, bytes]:
    return {str(p.relative_to(table)): p.read_bytes() for p in sorted(table.rglob("*.parquet"))}


@pytest.fixture
def settings_file(tmp_path, esp_settings) -> Path:
    path = tmp_path / "esp.json"
    path.write_text(
        json.dumps(
            {
                "run_dir_name": str(tmp_path / "run"),
                "spark": {"master": "local[2]", "ui_enabled": False, "shuffle_partitions": 4},
            }
        )
    )
    return path


def invoke_backfill(*args: str):
    import typer
    from typer.testing import CliRunner

    from orchestration.cli.backfill import backfill_command

    app = typer.Typer()
    app.command()(backfill_command)
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_backfill_three_days_equals_an_independent_count_and_is_idempotent(spark, settings_file, tmp_path):
    from dagster import DagsterInstance

    root = tmp_path / "run" / "streams" / "wordcount"
    write_bronze(spark, Path(bronze_table_path(root)))
    first, last = DAYS[0].isoformat(), DAYS[-1].isoformat()

    result = invoke_backfill("--pipeline", "wordcount", "--from", first, "--to", last, "--config", str(settings_file))

    assert result.exit_code == 0, result.output
    table = Path(daily_table_path(root))
    for day in DAYS:
        assert daily_counts(spark, table, day) == expected_counts(day)
    assert sorted(p.name for p in table.iterdir()) == [f"date={d.isoformat()}" for d in DAYS]  # no staging left
    instance = DagsterInstance.from_config(str(tmp_path / "run" / "dagster"))
    materialized = instance.get_materialized_partitions(daily_counts_asset_key("wordcount"))
    assert materialized == {d.isoformat() for d in DAYS}
    assert "3/3" in result.output

    before = partition_files(table)
    again = invoke_backfill("--pipeline", "wordcount", "--from", DAYS[1].isoformat(), "--config", str(settings_file))

    assert again.exit_code == 0, again.output
    assert daily_counts(spark, table, DAYS[1]) == expected_counts(DAYS[1])
    after = partition_files(table)
    assert {k for k in after if not k.startswith(f"date={DAYS[1]}")} == {
        k for k in before if not k.startswith(f"date={DAYS[1]}")
    }
    assert all(after[k] == before[k] for k in before if not k.startswith(f"date={DAYS[1]}"))  # other days untouched


def test_a_range_without_data_is_refused_with_a_clear_message(spark, settings_file, tmp_path):
    write_bronze(spark, Path(bronze_table_path(tmp_path / "run" / "streams" / "wordcount")))
    quiet = (TODAY - dt.timedelta(days=30)).isoformat()

    result = invoke_backfill("--pipeline", "wordcount", "--from", quiet, "--to", quiet, "--config", str(settings_file))

    assert result.exit_code == 1
    assert "no data for wordcount" in result.output and f"from {DAYS[0]} to {DAYS[-1]}" in result.output
    assert "Traceback" not in result.output
