"""Each elastic stage of a job has its own folders and metrics topic; the first keeps the stream's,
so a one-stage stream's files and topics are what they always were."""

from __future__ import annotations

import json

from elasticity.layout import Layout
from pipelines.probes import make_probes, probe_keys
from pipelines.streams import names
from pipelines.streams.probe_emitter import ProbeEmitter
from tests.fakes.kafka import FlakyBroker


def test_the_first_stage_keeps_the_streams_folders_and_a_later_one_has_its_own():
    first = names.stage_paths("/runs/s", names.FIRST_STAGE)
    assert (first.elastic, first.local, first.control) == (
        names.elastic_path("/runs/s"),
        names.local_state_path("/runs/s"),
        names.control_path("/runs/s"),
    )
    later = names.stage_paths("/runs/s", "pages")
    paths = (later.elastic, later.local, later.control)
    assert all(p.startswith("/runs/s/stages/pages/") for p in paths) and len(set(paths)) == 3
    # No stage's folder is inside another's: a sweep or listing of one never sees the other's files.
    assert not any(p.startswith(q + "/") for p in paths for q in (first.elastic, first.local, first.control))
    on_store = names.stage_paths("s3a://bucket/s", "pages")
    assert on_store.elastic == "s3a://bucket/s/stages/pages/elastic" and not on_store.local.startswith("s3a:")


def test_each_stage_has_its_own_metrics_topic():
    assert names.stage_metrics_topic("clicks", names.FIRST_STAGE) == names.metrics_topic("clicks")
    assert names.stage_metrics_topic("clicks", "pages") == "clicks.metrics.pages"


def test_a_later_stages_probe_names_its_stage_and_a_first_stage_probe_is_unchanged():
    layout = Layout.uniform(2)
    keys = probe_keys(layout)
    first = [json.loads(p.to_json()) for p in make_probes(layout, keys, now_ms=5)]
    later = [json.loads(p.to_json()) for p in make_probes(layout, keys, now_ms=5, stage="pages")]
    assert all("stage" not in p for p in first)
    assert [p["stage"] for p in later] == ["pages", "pages"]


def test_the_emitter_probes_every_channel_of_every_stage():
    broker = FlakyBroker()
    emitter = ProbeEmitter(
        "b",
        "t",
        lambda: Layout.uniform(2),
        1.0,
        producer_factory=broker.producer,
        later_stages=lambda: {"pages": Layout.uniform(3)},
    )
    emitter._send_round(broker.producer("b"))
    sent = [json.loads(v) for v in broker.values]
    assert sorted((p.get("stage", "main"), p["channel"]) for p in sent) == [
        ("main", 0),
        ("main", 1),
        ("pages", 0),
        ("pages", 1),
        ("pages", 2),
    ]
