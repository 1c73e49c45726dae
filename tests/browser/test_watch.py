"""Watching the stack in a real browser: the asset graph of a stream with its layout, daily and
checked assets; the stream asset's live observations and their plots; the elasticity sensor's
ticks and why."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from orchestration.elasticity.policy import POLICY_FILE
from orchestration.names import (
    RECONCILIATION_CHECK,
    RESULTS_SUITE_CHECK,
    STREAMS_GROUP,
    daily_counts_asset_key,
    elasticity_sensor_name,
    layout_asset_key,
    results_asset_key,
    stream_asset_key,
)
from pipelines.streams.names import control_path
from tests.browser.stack import STREAM
from tests.browser.ui import expand_asset_groups, metadata_value, open_overview_section, switch_sensor

pytestmark = [pytest.mark.browser, pytest.mark.timeout(1500)]  # the first test also starts the stack

STREAM_ASSET = stream_asset_key(STREAM).to_user_string()
LAYOUT_ASSET = layout_asset_key(STREAM).to_user_string()
DAILY_ASSET = daily_counts_asset_key(STREAM).to_user_string()
RESULTS_ASSET = results_asset_key(STREAM).to_user_string()
SENSOR = elasticity_sensor_name(STREAM)


def test_asset_graph_shows_the_stream_its_layout_daily_counts_and_checks(page, shoot):
    # Only the four assets, so that the fitted graph is large enough to read.
    shown = (STREAM_ASSET, LAYOUT_ASSET, DAILY_ASSET, RESULTS_ASSET)
    page.goto("/asset-groups~" + quote(" or ".join(f'key:"{asset}"' for asset in shown)))
    expand_asset_groups(page, STREAMS_GROUP)
    for asset in shown:
        expect(page.get_by_text(asset, exact=True).first).to_be_visible()
    # The results node counts its two checks (results suite, reconciliation).
    expect(page.get_by_text(re.compile(r"\d+ / 2")).first).to_be_visible()
    shoot("asset-graph")

    page.goto(f"/assets/{RESULTS_ASSET}?view=checks")
    for check in (RESULTS_SUITE_CHECK, RECONCILIATION_CHECK):
        expect(page.get_by_text(check, exact=True).first).to_be_visible()
    shoot("results-checks")


def test_stream_asset_shows_live_observations_that_change(page, shoot):
    page.goto(f"/assets/{STREAM_ASSET}?view=events")
    expect(page.get_by_text("Observed in run").first).to_be_visible()
    shoot("stream-observations")
    seen: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 240
    while len(seen) < 2:
        assert time.monotonic() < deadline, f"the newest observation stayed {seen}"
        page.reload()
        expect(page.get_by_text("Observed in run").first).to_be_visible()
        seen.add((metadata_value(page, "batches_done"), metadata_value(page, "lag_records")))
        time.sleep(3)
    assert metadata_value(page, "channels") != ""
    shoot("stream-observations-later")


PLOTTED = ("input_rows_per_s", "processed_rows_per_s", "lag_records", "probe_latency_p99_ms", "channels")
"""The live figures the issue names (input, processed, lag, p99 latency, channels)."""


def test_stream_asset_plots_its_observations_over_time(page, shoot):
    # Dagster 1.13 graphs every numeric metadata key of an asset's recent events in the overview's
    # Metadata section (its Table / Plots toggle); the Events tab has no plots.
    page.goto(f"/assets/{STREAM_ASSET}")
    plots = page.get_by_role("button", name=re.compile(r"Plots$")).first
    open_overview_section(page, "Metadata", plots)
    plots.click()
    expect(page.get_by_text("No numeric metadata entries")).to_have_count(0)
    for figure in PLOTTED:
        expect(page.get_by_text(figure, exact=True).first).to_be_visible()
    expect(page.locator("canvas").nth(len(PLOTTED) - 1)).to_be_visible()  # a chart per figure at least
    shoot("stream-plots")


def test_elasticity_sensor_ticks_say_why(page, shoot, stack):
    # The loop decides and says why, but may not rescale here: its channel bounds are pinned
    # (the stream's policy override), so the tests' own rescales are the only ones.
    policy = Path(control_path(stack.stream_root)) / POLICY_FILE
    channels = len(stack.committed_channels())
    policy.write_text(json.dumps({"min_channels": channels, "max_channels": channels, "slo_s": 10.0}))
    try:
        switch_sensor(page, SENSOR, running=True)
        # Each tick either asked for a run or skipped with the controller's sentence.
        skipped = page.get_by_role("cell").get_by_text("0 runs requested")
        expect(skipped.first).to_be_visible(timeout=180_000)
        shoot("sensor-ticks")
        skipped.last.click()
        dialog = page.get_by_role("dialog")
        expect(dialog.get_by_text("Skip reason")).to_be_visible()
        expect(dialog).to_contain_text(re.compile(r"SLO [\d,]+ ms"))
        shoot("sensor-tick-reason")
        dialog.get_by_role("button", name="Close").click()
        expect(dialog).to_be_hidden()  # its fading overlay must not take the switch's click
        switch_sensor(page, SENSOR, running=False)
    finally:
        stack.stop_elasticity()
        policy.unlink(missing_ok=True)
