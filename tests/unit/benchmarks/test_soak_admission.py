"""`esp soak --admission-high/--admission-low`: every stream the soak starts gets the watermarks,
the report's options record them, and the report says what admission control did per stream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from rich.console import Console

from benchmarks.soak import Soak, SoakOptions, SoakReport, StreamProcess
from benchmarks.soak_admission import AdmissionLog
from benchmarks.soak_command import summary_table
from benchmarks.soak_jobs import JOBS
from orchestration.cli.common import admission_options as _admission
from pipelines.streams.metrics import BatchMetrics


def _options(**changes) -> SoakOptions:
    defaults = dict(minutes=1.0, seed=7, folder=Path("/tmp/soak"), bootstrap="127.0.0.1:1", config=Path("/tmp/e.json"))
    return SoakOptions(**{**defaults, **changes})


def _command(options: SoakOptions) -> list[str]:
    return StreamProcess(options, JOBS["wordcount"], Path("/tmp/soak/wordcount.log")).command()


def _flag(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def test_every_stream_runs_with_admission_when_the_soak_is_asked_for_it():
    command = _command(_options(admission_high_s=3.0, admission_low_s=1.2))
    assert command[1:4] == ["stream", "run", "--config"]
    assert _flag(command, "--admission-high") == "3.0" and _flag(command, "--admission-low") == "1.2"
    only_high = _command(_options(admission_high_s=2.5))
    assert _flag(only_high, "--admission-high") == "2.5" and "--admission-low" not in only_high


def test_by_default_no_stream_gets_an_admission_flag():
    command = _command(_options())
    assert not [part for part in command if part.startswith("--admission")]


def test_the_command_line_options_give_the_watermarks_in_force_and_refuse_a_low_one_alone():
    assert _admission(None, None) is None
    chosen = _admission(3.0, None)
    assert (chosen.high_watermark_s, chosen.low_watermark_s) == (3.0, pytest.approx(1.2))  # esp stream run's default
    assert _admission(3.0, 1.0).low_watermark_s == 1.0
    with pytest.raises(typer.BadParameter):
        _admission(None, 1.0)
    with pytest.raises(typer.BadParameter):
        _admission(1.0, 2.0)


def test_the_report_records_the_options_admission_included():
    options = _options(admission_high_s=3.0, admission_low_s=1.2)
    recorded = json.loads(json.dumps(SoakReport(seed=7, minutes=1.0, options=options.to_json()).to_json()))
    assert recorded["options"]["admission_high_s"] == 3.0 and recorded["options"]["admission_low_s"] == 1.2
    assert recorded["options"]["admission"] is True and recorded["options"]["jobs"] == ["wordcount", "adclicks"]
    assert "folder" not in recorded["options"] and "bootstrap" not in recorded["options"]
    assert _options().to_json()["admission"] is False and _options().to_json()["admission_high_s"] is None


def _metrics(batch_id: int, cap: int | None, rule: str | None, restart_ms: float | None = None) -> bytes:
    metrics = BatchMetrics("wordcount", batch_id, 1, 2, wall_time=1000.0 + batch_id)
    metrics.admission_cap, metrics.admission_rule, metrics.query_restart_ms = cap, rule, restart_ms
    return metrics.to_json()


def test_the_admission_log_counts_capped_batches_and_cap_changes_the_last_record_of_a_batch_winning():
    log = AdmissionLog()
    for raw in (
        _metrics(1, None, "uncapped"),
        _metrics(2, 600, "cap"),
        _metrics(3, 420, "lower", restart_ms=90.0),
        _metrics(4, 420, "hold"),
        _metrics(3, 420, "lower"),  # batch 3 replayed after a kill: published again
        b"not json",
        None,  # a tombstone
        _metrics(5, None, "lift", restart_ms=80.0),
    ):
        log.take(raw)
    assert log.summary() == {
        "batches": 5,
        "capped_batches": 3,
        "cap_changes": 3,  # None -> 600 -> 420 -> 420 -> None
        "min_cap": 420,
        "max_cap": 600,
        "rules": {"cap": 1, "hold": 1, "lift": 1, "lower": 1, "uncapped": 1},
        "query_restarts": 1,  # batch 3's last record has none
        "malformed_metrics": 2,
    }


def test_with_admission_the_soak_reads_each_streams_metrics_and_reports_per_stream():
    soak = Soak(_options(dagster=False, admission_high_s=3.0, admission_low_s=1.2), broker=None, progress=print)
    assert {name: tail.topic for name, tail in soak.metrics_tails.items()} == {
        "wordcount": "wordcount.metrics",
        "adclicks": "adclicks.metrics",
    }
    soak.metrics_tails["wordcount"].on_record(type("Record", (), {"value": _metrics(1, 500, "cap")})())
    soak._report_admission()
    assert soak.report.admission["wordcount"]["capped_batches"] == 1
    assert soak.report.admission["adclicks"]["batches"] == 0
    assert soak.report.admission["wordcount"]["metrics_read_error"] is None
    results = soak.report.to_json()
    text = _table_text(results)
    assert "on (high 3 s, low 1.2 s)" in text and "wordcount capped batches" in text

    off = Soak(_options(dagster=False), broker=None, progress=print)
    assert off.metrics_tails == {}
    off._report_admission()
    assert off.report.to_json()["admission"] is None
    assert "off" in _table_text(off.report.to_json())


def _table_text(results: dict) -> str:
    console = Console(record=True, width=160)
    console.print(summary_table(results))
    return console.export_text()
