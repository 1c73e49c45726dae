"""The resizing asset on a stopped stream's real state: dry run, offline migration, refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize

from elasticity.layout import Layout
from elasticity.migration import LayoutRegistry
from elasticity.state import Int64Codec, Location, RocksBackend
from orchestration.elasticity.assets import make_layout_asset
from orchestration.names import layout_asset_key, op_name
from orchestration.streams.catalog import StreamEntry, stream_spec
from tests.unit.elasticity.migration_helpers import assert_owned_exactly_once, populate

ENTRY = StreamEntry(name="fake", job="wordcount", input_topic="fake-in", load_kind="words")
LAYOUT_OP = op_name(layout_asset_key(ENTRY.name))


@pytest.fixture
def stopped_stream(settings, tmp_path):
    """A stream that ran and stopped cleanly: 2 channels of state, a committed layout, old checkpoint."""
    spec = stream_spec(settings.load(), ENTRY)
    LayoutRegistry(Location.of(spec.elastic_root)).initialize(Layout.uniform(2))
    backend = RocksBackend(Int64Codec(), durable=spec.elastic_root, local_dir=str(tmp_path / "seed"))
    expected = populate(backend, Layout.uniform(2), 2000)
    backend.close()
    for folder in ("offsets", "commits"):
        (Path(spec.checkpoint) / folder).mkdir(parents=True)
        (Path(spec.checkpoint) / folder / "1").write_text("v1\n")
    return spec, expected


def _run(settings, config: dict, instance):
    return materialize(
        [make_layout_asset(ENTRY)],
        instance=instance,
        resources={"esp_settings": settings},
        run_config={"ops": {LAYOUT_OP: {"config": {"alive_within_s": 0.001, **config}}}},
        raise_on_error=False,
    )


def test_dry_run_shows_the_plan_and_moves_nothing(settings, stopped_stream):
    spec, _ = stopped_stream
    with DagsterInstance.ephemeral() as instance:
        result = _run(settings, {"target": {"op": "scale_to", "channels": 3}, "dry_run": True}, instance)
    assert result.success
    assert not result.get_asset_materialization_events()
    [observation] = [
        e.event_specific_data.asset_observation for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"
    ]
    metadata = observation.metadata
    assert metadata["channels_before"].value == 2 and metadata["channels_after"].value == 3
    assert metadata["ring_fraction_moved"].value == pytest.approx(1 / 3, abs=1e-6)
    assert metadata["ideal_fraction"].value == pytest.approx(1 / 3, abs=1e-6)
    assert "data:image/png;base64," in metadata["ring_shares"].value
    assert LayoutRegistry(Location.of(spec.elastic_root)).committed().epoch == 0


def test_a_stopped_stream_is_migrated_offline_with_every_key_owned_once(settings, stopped_stream, tmp_path):
    spec, expected = stopped_stream
    with DagsterInstance.ephemeral() as instance:
        result = _run(settings, {"target": {"op": "scale_to", "channels": 3}, "reason": "test", "rule": "P1"}, instance)
    assert result.success
    [materialization] = result.asset_materializations_for_node(LAYOUT_OP)
    metadata = materialization.metadata
    assert metadata["mode"].value == "offline"
    assert (metadata["channels_before"].value, metadata["channels_after"].value) == (2, 3)
    assert metadata["rule"].value == "P1"
    # Only the new channel's share moves: about a third of the keys, never more than ~40%.
    assert 0.25 < metadata["keys_moved"].value / len(expected) < 0.42
    for phase in ("donate_ms", "collect_ms", "commit_ms", "pause_ms"):
        assert metadata[phase].value >= 0
    backend = RocksBackend(Int64Codec(), durable=spec.elastic_root, local_dir=str(tmp_path / "check"))
    layout = assert_owned_exactly_once(backend, spec.elastic_root, expected)
    backend.close()
    assert (layout.epoch, layout.n_channels) == (1, 3)


def test_offline_rescale_is_refused_when_the_stream_stopped_mid_batch(settings, stopped_stream):
    spec, _ = stopped_stream
    (Path(spec.checkpoint) / "offsets" / "2").write_text("v1\n")  # batch 2 planned, never committed
    with DagsterInstance.ephemeral() as instance:
        result = _run(settings, {"target": {"op": "scale_to", "channels": 3}}, instance)
    assert not result.success
    failure = result.failure_data_for_node(LAYOUT_OP)
    assert "stopped in the middle of batch 2" in failure.user_failure_data.description
    assert LayoutRegistry(Location.of(spec.elastic_root)).committed().epoch == 0


def test_a_target_that_makes_no_sense_fails_with_the_reason(settings, stopped_stream):
    with DagsterInstance.ephemeral() as instance:
        result = _run(settings, {"target": {"op": "merge", "channel": 7}}, instance)
    assert not result.success
    assert "needs a channel among [0, 1]" in result.failure_data_for_node(LAYOUT_OP).user_failure_data.description


def test_only_the_newest_share_plots_are_kept(tmp_path):
    from orchestration.elasticity.realizer import KEEP_PLOTS, plan_rescale, write_share_plot
    from pipelines.streams.control import RescaleTarget

    current = Layout.uniform(2)
    for epoch in range(1, KEEP_PLOTS + 4):
        path = tmp_path / f"layout-e{epoch}.png"
        write_share_plot(plan_rescale(current, RescaleTarget(op="scale_to", channels=3), epoch), path)
        stamp = 1_700_000_000 + epoch  # written in epoch order
        os.utime(path, (stamp, stamp))
    kept = sorted(int(p.stem.removeprefix("layout-e")) for p in tmp_path.glob("*.png"))
    assert kept == list(range(4, KEEP_PLOTS + 4))  # the oldest go once a newer one is written


PAGES_ENTRY = StreamEntry(name="paged", job="examples.sessions.pages:pages_job", input_topic="clicks")


def test_a_later_stages_resizing_asset_rescales_that_stage_only(settings, tmp_path):
    """A two-stage job gets a resizing asset per stage; the second stage's migrates the second
    stage's state (every key owned once) and leaves the first stage's layout and state as they were."""
    from orchestration.elasticity.definitions import elasticity_definitions
    from pipelines.streams.names import stage_paths

    definitions = elasticity_definitions([PAGES_ENTRY])
    keys = {asset.key for asset in definitions.assets}
    assert {layout_asset_key("paged"), layout_asset_key("paged", "pages")} <= keys
    spec = stream_spec(settings.load(), PAGES_ENTRY)
    expected = {}
    for stage, seed in (("main", 1), ("pages", 2)):
        elastic = stage_paths(spec.folder, stage).elastic
        LayoutRegistry(Location.of(elastic)).initialize(Layout.uniform(2))
        backend = RocksBackend(Int64Codec(), durable=elastic, local_dir=str(tmp_path / f"seed-{stage}"))
        expected[stage] = populate(backend, Layout.uniform(2), 500 * seed)
        backend.close()
    op = op_name(layout_asset_key("paged", "pages"))
    with DagsterInstance.ephemeral() as instance:
        result = materialize(
            [make_layout_asset(PAGES_ENTRY, "pages")],
            instance=instance,
            resources={"esp_settings": settings},
            run_config={
                "ops": {op: {"config": {"alive_within_s": 0.001, "target": {"op": "scale_to", "channels": 3}}}}
            },
            raise_on_error=False,
        )
    assert result.success
    for stage, channels in (("pages", 3), ("main", 2)):
        elastic = stage_paths(spec.folder, stage).elastic
        backend = RocksBackend(Int64Codec(), durable=elastic, local_dir=str(tmp_path / f"check-{stage}"))
        layout = assert_owned_exactly_once(backend, elastic, expected[stage])
        backend.close()
        assert layout.n_channels == channels, stage
