"""Pure parts of the batch layer: reconciliation spans, bronze folder listing, backfill requests
(unknown pipeline, bad or future dates, ranges without data)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from pipelines.batch.pipelines import _union_find_spans
from pipelines.batch.tables import batch_days, bronze_days
from pipelines.streams.names import bronze_table_path

D = [dt.date(2026, 11, d) for d in range(1, 7)]


def test_each_day_is_its_own_span_unless_a_batch_straddles_midnight():
    spans = _union_find_spans([{D[0]}, {D[1]}, {D[1], D[2]}, {D[2]}, {D[4], D[5]}, {D[3]}])

    assert spans == {
        D[0]: "2026-11-01",
        D[1]: "2026-11-02..2026-11-03",
        D[2]: "2026-11-02..2026-11-03",
        D[3]: "2026-11-04",
        D[4]: "2026-11-05..2026-11-06",
        D[5]: "2026-11-05..2026-11-06",
    }


def test_a_chain_of_straddling_batches_joins_all_its_days():
    spans = _union_find_spans([{D[0], D[1]}, {D[2], D[3]}, {D[1], D[2]}])

    assert set(spans.values()) == {"2026-11-01..2026-11-04"}


def make_bronze(root, layout: dict[str, list[int]]):
    bronze = Path(bronze_table_path(root))
    for day, batches in layout.items():
        for b in batches:
            (bronze / f"date={day}" / f"batch_id={b}").mkdir(parents=True)
    (bronze / "date=2026-11-09").mkdir(parents=True)  # a day folder without batches holds no data
    return bronze


def test_bronze_days_and_batches_come_from_the_folders(tmp_path):
    bronze = make_bronze(tmp_path, {"2026-11-02": [3, 4], "2026-11-03": [4, 5]})

    assert bronze_days(str(bronze)) == [D[1], D[2]]
    assert batch_days(str(bronze)) == {3: {D[1]}, 4: {D[1], D[2]}, 5: {D[2]}}


@pytest.fixture
def settings(tmp_path):
    from orchestration.streams.catalog import stream_root
    from pipelines.settings import EspSettings
    from tests.conftest import REPO_ROOT

    settings = EspSettings(project_root=REPO_ROOT, run_dir_name=str(tmp_path / "run"))
    make_bronze(stream_root(settings, "wordcount"), {"2026-11-02": [0], "2026-11-03": [1]})
    return settings


def plan(settings, *args, **kwargs):
    from orchestration.backfills.runner import plan_backfill

    return plan_backfill(settings, *args, today=dt.date(2026, 11, 22), **kwargs)


def test_a_range_plans_every_day_and_names_the_empty_ones(settings):
    result = plan(settings, "wordcount", "2026-11-01", "2026-11-03")

    assert result.days == D[:3]
    assert result.empty_days == [D[0]]
    assert result.spec.bronze_table.endswith("streams/wordcount/tables/bronze")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nope", "2026-11-01", "2026-11-02"), "unknown pipeline 'nope'; known pipelines: adclicks, sessions, "),
        (("wordcount", "2026-11-30", "2026-12-02"), "2026-12-02 is in the future (today is 2026-11-22 UTC)"),
        (("wordcount", "2026-11-03", "2026-11-01"), "--from 2026-11-03 is after --to 2026-11-01"),
        (("wordcount", "11/01/2026", "2026-11-02"), "--from: '11/01/2026' is not a date in YYYY-MM-DD form"),
        (("wordcount", "2020-01-01", "2020-01-02"), "daily partitions start on 2025-01-01"),
        (
            ("wordcount", "2026-11-10", "2026-11-12"),
            "no data for wordcount between 2026-11-10 and 2026-11-12 in the bronze archive",
        ),
        (("adclicks", "2026-11-02", "2026-11-03"), "is empty (has the stream run?)"),
    ],
)
def test_bad_requests_are_refused_with_a_sentence(settings, args, message):
    from orchestration.backfills.runner import BackfillError

    with pytest.raises(BackfillError) as error:
        plan(settings, *args)

    assert message in str(error.value)
    if "no data for wordcount" in message:
        assert "it holds 2 day(s) from 2026-11-02 to 2026-11-03" in str(error.value)


def test_the_cli_prints_the_refusal_without_a_traceback(tmp_path):
    import json

    import typer
    from typer.testing import CliRunner

    from orchestration.cli.backfill import backfill_command

    config = tmp_path / "esp.json"
    config.write_text(json.dumps({"run_dir_name": str(tmp_path / "run")}))
    app = typer.Typer()
    app.command()(backfill_command)

    result = CliRunner().invoke(app, ["--pipeline", "wordcount", "--from", "2999-01-01", "--config", str(config)])

    assert result.exit_code == 1
    assert "error:" in result.output and "is in the future" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
