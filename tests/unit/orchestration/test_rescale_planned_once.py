"""A rescale of a running stream is planned once, by whoever asks: `rescale_online`, the resizing
asset and `esp stream rescale` send the planned layout, and the stream applies it without
planning again. The stream here is the real batch-boundary step (`ElasticStream`, no Spark)
answering through the control folder from a thread; every plan is a `RescaleTarget.next_layout`
call, counted."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize
from typer.testing import CliRunner

from elasticity.layout import Layout
from elasticity.state import Location
from orchestration.cli.stream import stream_app
from orchestration.elasticity.assets import make_layout_asset
from orchestration.elasticity.realizer import plan_on_committed, rescale_online
from orchestration.names import layout_asset_key, op_name
from orchestration.streams.catalog import StreamEntry, stream_spec
from pipelines.streams.control import RescaleTarget
from pipelines.streams.runner import ElasticStream
from pipelines.streams.spec import StreamSpec

ENTRY = StreamEntry(name="fake", job="wordcount", input_topic="fake-in", load_kind="words")
LAYOUT_OP = op_name(layout_asset_key(ENTRY.name))


@pytest.fixture
def plans(monkeypatch) -> list[RescaleTarget]:
    """Every target planned from now on, by anyone."""
    planned: list[RescaleTarget] = []
    original = RescaleTarget.next_layout

    def counted(self: RescaleTarget, current: Layout) -> Layout:
        planned.append(self)
        return original(self, current)

    monkeypatch.setattr(RescaleTarget, "next_layout", counted)
    return planned


def _running_stream(spec: StreamSpec) -> Iterator[ElasticStream]:
    """The stream's rescale step, run at a 'batch boundary' every 50 ms until the test ends."""
    stream = ElasticStream(None, spec)  # type: ignore[arg-type]  # the rescale step never touches Spark
    Location.of(spec.elastic_root).ensure()
    stream.registry.initialize(Layout.uniform(spec.channels))
    stream.migrator().recover()
    done = threading.Event()

    def boundaries() -> None:
        batch = 0
        while not done.wait(0.05):
            batch += 1
            stream.rescaling.apply_pending(batch)

    thread = threading.Thread(target=boundaries, daemon=True)
    thread.start()
    yield stream
    done.set()
    thread.join(timeout=60)
    stream.stop(timeout_s=0)


@pytest.fixture
def stream(tmp_path) -> Iterator[ElasticStream]:
    spec = StreamSpec(name="once", input_topic="unused", bootstrap_servers="127.0.0.1:1", root=str(tmp_path))
    yield from _running_stream(spec.model_copy(update={"channels": 2}))


def test_rescale_online_sends_its_plan_and_the_stream_applies_it(stream, plans):
    target = RescaleTarget(op="scale_to", channels=3)
    plan = plan_on_committed(stream.spec, target)
    result = rescale_online(stream.spec, target, "test", timeout_s=120, plan=plan)
    assert result.status == "committed" and result.error is None
    assert result.layout == plan.after == stream.registry.committed()
    assert result.report is not None and result.report.channels_after == 3
    assert plans == [target]  # planned here only


def test_esp_stream_rescale_plans_once(stream, plans):
    root = stream.spec.root
    outcome = CliRunner().invoke(stream_app, ["rescale", "--root", root, "--split", "0", "--timeout", "120"])
    assert outcome.exit_code == 0, outcome.output
    assert "committed" in outcome.output and "2 → 3" in outcome.output
    assert plans == [RescaleTarget(op="split", channel=0)]
    assert stream.registry.committed() == Layout.uniform(2).split(0)


@pytest.fixture
def catalog_stream(settings) -> Iterator[ElasticStream]:
    """The catalog stream the asset rescales, running: its checkpoint committed a batch just now."""
    spec = stream_spec(settings.load(), ENTRY, channels=2)
    for folder in ("offsets", "commits"):
        (Path(spec.checkpoint) / folder).mkdir(parents=True)
        (Path(spec.checkpoint) / folder / "1").write_text("v1\n")
    yield from _running_stream(spec)


def test_the_resizing_asset_plans_once_and_records_the_streams_typed_answer(settings, catalog_stream, plans):
    target = {"op": "merge", "channel": 1}
    with DagsterInstance.ephemeral() as instance:
        run = materialize(
            [make_layout_asset(ENTRY)],
            instance=instance,
            resources={"esp_settings": settings},
            run_config={"ops": {LAYOUT_OP: {"config": {"target": target, "timeout_s": 120, "rule": "merge"}}}},
        )
    assert run.success
    assert plans == [RescaleTarget(**target)]
    [materialization] = run.asset_materializations_for_node(LAYOUT_OP)
    metadata = {name: value.value for name, value in materialization.metadata.items()}
    assert metadata["mode"] == "online" and metadata["operation"] == "merge"
    assert (metadata["channels_before"], metadata["channels_after"]) == (2, 1)
    assert metadata["layout_epoch"] == 1 and metadata["epoch_after"] == 1
    assert "donate_ms" in metadata
    assert catalog_stream.registry.committed() == Layout.uniform(2).merge(1)
