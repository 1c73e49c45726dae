"""A two-stage elastic job (clicks sessionized per user, then each closed session's clicks added up
per landing page: `examples.sessions.pages`) on the real broker and Spark. Each stage rescales on
its own without touching the other's layout or state, each reports its own metrics and probe
latencies, and the results equal a plain oracle; SIGKILLed between the first stage's commit and the
second's, the stream replays the batch through both and still equals the oracle."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.streams import (
    clicks_in_event_time_order,
    committed_batches,
    config_for,
    kill_group,
    produce,
    run_esp,
    start_stream,
    wait_for_checkpoint,
)

pytestmark = pytest.mark.integration

JOB = "examples.sessions.pages:pages_job"


def _clicks(count: int, offset: int = 0) -> list[str]:
    """Clicks in event-time order (one partition: none is late) on 9 landing pages."""
    return clicks_in_event_time_order(count, offset, pages=9)


def _expected_pages(spark, bootstrap: str, topic: str, root: Path) -> dict[str, int]:
    """landing page → clicks of the sessions closed under the watermark the last batch ran with."""
    from examples.sessions.job import GAP_MS
    from examples.sessions.oracle import sessions_oracle
    from pipelines import kafka_io
    from pipelines.probes import PROBE_KAFKA_KEY
    from pipelines.streams.names import control_path
    from pipelines.streams.watermark import WatermarkLog

    raw = kafka_io.read_batch(spark, bootstrap, topic).collect()
    clicks = [json.loads(r.value) for r in raw if r.key != PROBE_KAFKA_KEY]
    watermark = WatermarkLog(f"{control_path(str(root))}/watermark", 0).newest_watermark()
    sessions = sessions_oracle([(-1, [(c["user_id"], c["page"], c["event_time"]) for c in clicks])], GAP_MS, watermark)
    totals: Counter[str] = Counter()
    for _, landing, _, _, count in sessions:
        totals[landing] += count
    assert sum(totals.values()) > 1_000, "too few sessions closed to tell anything"
    return dict(totals)


def _streamed_pages(spark, root: Path) -> dict[str, int]:
    from pipelines.streams.names import results_table_path
    from pipelines.streams.results import latest_rows

    return {
        r.landing_page: r.clicks for r in latest_rows(spark, results_table_path(str(root)), ["landing_page"]).collect()
    }


def _layouts(root: Path, stage: str):
    from elasticity.migration import LayoutRegistry
    from elasticity.state import Location
    from pipelines.streams.names import stage_paths

    registry = LayoutRegistry(Location.of(stage_paths(str(root), stage).elastic))
    return [registry.load(epoch) for epoch in range(registry.committed().epoch + 1)]


def _rescale(stream, stage: str, channels: int, bootstrap: str, clicks: list[str]) -> None:
    from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleTarget
    from pipelines.streams.names import stage_paths

    control = ControlChannel(stage_paths(stream.spec.folder, stage).control)
    request = RescaleRequest(target=RescaleTarget(op="scale_to", channels=channels), reason=f"test: {stage}")
    control.request(request)
    produce(bootstrap, stream.spec.input_topic, clicks)
    result = control.wait_for_result(request.request_id, 120)
    assert result.status == "committed", result


def test_each_stage_rescales_alone_and_results_equal_the_oracle(spark, bootstrap, topic_factory, tmp_path):
    from pipelines.streams.metrics import read_recent
    from pipelines.streams.names import stage_metrics_topic
    from pipelines.streams.probe_emitter import ProbeEmitter
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec

    topic = topic_factory("pages", partitions=1)
    root = tmp_path / "pages"
    spec = StreamSpec(
        name="pages",
        job=JOB,
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(root),
        channels=2,
        trigger_seconds=0.3,
        archive_input=False,
        max_offsets_per_trigger=1_500,
    )
    produce(bootstrap, topic, _clicks(3_000))
    stream = ElasticStream(spark, spec)
    stream.start()
    probes = ProbeEmitter(bootstrap, topic, stream.registry.committed, 0.3, later_stages=stream.later_layouts)
    probes.start()
    try:
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
        _rescale(stream, "pages", 4, bootstrap, _clicks(1_500, offset=10_000))
        assert [layout.n_channels for layout in _layouts(root, "main")] == [2], "the pages rescale touched main"
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
        _rescale(stream, "main", 3, bootstrap, _clicks(1_500, offset=20_000))
        assert [layout.n_channels for layout in _layouts(root, "pages")] == [2, 4], "the main rescale touched pages"
        produce(bootstrap, topic, _clicks(1_500, offset=30_000))
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
        time.sleep(2)  # probe rounds under the last layouts
    finally:
        probes.stop()
        stream.stop()

    assert [layout.n_channels for layout in _layouts(root, "main")] == [2, 3]
    assert _streamed_pages(spark, root) == _expected_pages(spark, bootstrap, topic, root)
    pages = read_recent(bootstrap, stage_metrics_topic("pages", "pages"), limit=500)
    main = read_recent(bootstrap, stage_metrics_topic("pages", "main"), limit=500)
    assert {m.stage for m in pages} == {"pages"} and {m.stage for m in main} == {"main"}
    assert pages[-1].channels == 4 and main[-1].channels == 3
    # The second stage's rows in are the first's rows out (closed sessions), batch by batch.
    out_by_batch = {m.batch_id: m.output_rows for m in main}
    assert all(m.input_records == out_by_batch[m.batch_id] for m in pages if m.batch_id in out_by_batch)
    assert sum(m.input_records for m in pages) > 0
    assert all(m.stage_ms is not None and m.stage_ms > 0 for m in pages + main)  # each stage's own job, timed
    # Each stage's probes reach each of its own channels (a later stage's latency includes the stages before).
    for metrics, channels in ((pages, 4), (main, 3)):
        recent = [m for m in metrics if m.channels == channels]
        probed = {c.channel for m in recent for c in m.per_channel if c.probe_latency_ms}
        assert probed == {c.channel for c in recent[-1].per_channel}, probed


def _newest_applied(root: Path, stage: str) -> int:
    """The newest batch any channel of `stage` holds in its durable state (-1: none)."""
    from elasticity.state import BytesCodec, HistoryBackend
    from pipelines.streams.names import stage_paths

    backend = HistoryBackend(BytesCodec(), durable=stage_paths(str(root), stage).elastic)
    try:
        return max((backend.open(channel).version.batch for channel in backend.channels()), default=-1)
    finally:
        backend.close()


def test_sigkill_between_the_stages_commits_then_results_equal_the_oracle(spark, bootstrap, topic_factory, tmp_path):
    """The first stage's tasks sleep after their commit (`--service-ms`), so a kill in that window
    leaves a batch the first stage applied and the second did not; the kills are repeated until one
    such is seen. The restarted stream also takes a rescale of the second stage from the CLI.

    (This is also `make test`'s SIGKILL of a user job's operator, timers and bytes state: the
    one-stage sessions job's own crash test runs in `make test-long`.)"""
    topic = topic_factory("pages-crash", partitions=1)
    produce(bootstrap, topic, _clicks(6_000))
    config = config_for(tmp_path, bootstrap)
    root = tmp_path / "stream"
    checkpoint = str(root / "checkpoint")
    args = ["--name", "pages-crash", "--job", JOB, "--topic", topic, "--root", str(root), "--channels", "2"]
    args += ["--trigger", "0.1", "--max-offsets", "600", "--observe-every", "1", "--service-ms", "1"]
    # Adaptive snapshots with a 1 s period and a tiny bound: both stages' snapshots are written beside
    # nearly every batch, so the kill may land in one and the restart reads them back.
    args += ["--snapshots", "adaptive", "--snapshot-period", "1", "--max-recovery", "0.02"]
    log = tmp_path / "stream.log"

    mid_chain = 0
    for attempt in range(6):
        process = start_stream(config, log, *args)
        deadline = time.monotonic() + 180
        start = committed_batches(checkpoint)
        while committed_batches(checkpoint) < start + 2:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        # Stage main's tasks (~300 clicks each) sleep ~0.3 s after committing; poll for that window.
        while _newest_applied(root, "main") <= _newest_applied(root, "pages") and time.monotonic() < deadline:
            time.sleep(0.02)
        kill_group(process, signal.SIGKILL)
        if _newest_applied(root, "main") > _newest_applied(root, "pages"):
            mid_chain += 1
        produce(bootstrap, topic, _clicks(500, offset=50_000 * (attempt + 1)))
        if mid_chain:
            break
    assert mid_chain, f"none of {attempt + 1} kills landed between the stages' commits"
    print(f"kills: {attempt + 1}, between the stages' commits: {mid_chain}")

    process = start_stream(config, log, *args)
    try:
        rescaled = run_esp(
            config,
            "stream",
            "rescale",
            "--name",
            "pages-crash",
            "--root",
            str(root),
            "--stage",
            "pages",
            "--channels",
            "3",
        )
        assert rescaled.returncode == 0, rescaled.stdout + rescaled.stderr
        wait_for_checkpoint(checkpoint, topic, bootstrap, process=process, timeout_s=300)
    finally:
        kill_group(process, signal.SIGTERM)

    assert [layout.n_channels for layout in _layouts(root, "pages")] == [2, 3]
    assert [layout.n_channels for layout in _layouts(root, "main")] == [2]
    assert _streamed_pages(spark, root) == _expected_pages(spark, bootstrap, topic, root), log.read_text()[-3000:]
