"""`esp status`: a stream's row from a scripted stream, and the table drawn from rows."""

from __future__ import annotations

from rich.console import Console

from orchestration.elasticity.decisions import DecisionRecord, read_decision, write_decision
from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.elasticity.status import StreamStatus, read_status, render_status
from tests.fakes.elasticity_stream import FakeSource, FakeStream

POLICY = ElasticityPolicy(slo_s=5.0, sample_period_s=10.0)
NOW = 1_000_000.0


def _text(table) -> str:
    console = Console(record=True, width=200)
    console.print(table)
    return console.export_text()


def test_a_row_holds_the_collectors_numbers_and_the_last_decision():
    stream = FakeStream(channels=(0, 2, 5)).run(10, 300, 0.9, lag_records=120)
    decision = DecisionRecord(at=stream.now_s - 4, rescale=False, rule="P2", reason="stable at 3 channels")
    status, offsets = read_status("words", FakeSource(stream), POLICY, decision, None, stream.now_s)
    assert (status.channels, status.epoch, status.slo_ms) == (3, 0, 5000)
    assert status.p99_ms >= 900 and status.lag_records == 120
    assert status.processed_rps > 0 and status.problem is None
    assert offsets is not None  # the next refresh derives the input rate from these
    stream.run(10, 300, 0.9, lag_records=120)
    again, _ = read_status("words", FakeSource(stream), POLICY, decision, offsets, stream.now_s)
    assert 250 <= again.input_rps <= 350


def test_a_stream_without_metrics_says_why():
    status, offsets = read_status("words", FakeSource(FakeStream()), POLICY, None, None, NOW)
    assert status.channels is None and offsets is None
    assert "no metrics yet" in status.problem


def test_the_table_shows_rates_lag_p99_against_the_slo_and_the_reason():
    rows = [
        StreamStatus(
            "wordcount",
            5000,
            channels=4,
            epoch=3,
            input_rps=1234,
            processed_rps=1200,
            lag_records=56,
            p99_ms=7100,
            decision=DecisionRecord(at=NOW - 12, rescale=True, rule="P1", reason="overloaded (SLO 5,000 ms)"),
            driver="pid 4242 on host-a",
        ),
        StreamStatus("adclicks", 10_000, problem="no metrics yet: the stream has not finished a micro-batch"),
    ]
    text = _text(render_status(rows, NOW))
    assert "wordcount" in text and "4 (e3)" in text and "1,234" in text and "1,200" in text
    assert "7,100 / 5,000" in text
    assert "RESCALE P1 12s ago: overloaded (SLO 5,000 ms)" in text
    assert "adclicks" in text and "– / 10,000" in text and "no metrics yet" in text
    assert "pid 4242 on host-a" in text and "none" in text  # who writes each stream (adclicks: nobody)


def test_the_driver_is_the_live_holder_of_the_streams_lease(tmp_path):
    from elasticity.lease import acquire
    from orchestration.elasticity.status import driver_of

    root = str(tmp_path / "elastic")
    assert driver_of(root) is None
    lease = acquire(root, "stream driver of words")
    try:
        assert driver_of(root) == f"pid {lease.holder.pid} on {lease.holder.host}"
    finally:
        lease.release()


def test_the_sensors_last_decision_is_read_back(tmp_path):
    assert read_decision(tmp_path) is None
    record = DecisionRecord(at=NOW, rescale=False, rule="cooldown", reason="cooling down")
    write_decision(tmp_path, record)
    assert read_decision(tmp_path) == record
    (tmp_path / "last-decision.json").write_text("{broken")
    assert read_decision(tmp_path) is None


def test_a_multi_stage_streams_later_stages_show_their_own_channels(tmp_path):
    from elasticity.layout import Layout
    from elasticity.migration import LayoutRegistry
    from elasticity.state import Location
    from orchestration.elasticity.status import later_stage_layouts
    from pipelines.streams.names import stage_paths
    from pipelines.streams.spec import StreamSpec

    spec = StreamSpec(name="paged", job="examples.sessions.pages:pages_job", root=str(tmp_path))
    LayoutRegistry(Location.of(stage_paths(spec.folder, "pages").elastic)).initialize(Layout.uniform(5))
    later = later_stage_layouts(spec, ["pages", "never_started"])
    assert [(s.stage, s.channels, s.epoch) for s in later] == [("pages", 5, 0), ("never_started", None, None)]
    text = _text(render_status([StreamStatus("paged", 5000, channels=2, epoch=1, later_stages=later)], NOW))
    assert "2 (e1)" in text and "pages: 5 (e0)" in text and "never_started: –" in text


def test_into_a_pipe_the_table_is_printed_once_not_redrawn_live(monkeypatch):
    from typer.testing import CliRunner

    from orchestration.cli import status as status_cli
    from orchestration.cli.main import app

    reads = []
    monkeypatch.setattr(status_cli, "_read_all", lambda *args: reads.append(args) or [])

    def no_refresh(seconds):
        raise AssertionError("a live view into a pipe shows nothing until Ctrl-C")

    monkeypatch.setattr(status_cli.time, "sleep", no_refresh)
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 0, result.output
    assert len(reads) == 1
