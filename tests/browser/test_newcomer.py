"""A newcomer's walk through the control room in a real browser, with the stack up: scale the
stream from the resize job's launchpad and see its layout change within 3 minutes; change the SLO
from the policy job's launchpad; find the next decision of the elasticity sensor citing the new
SLO; stop the stream from the stop job's launchpad. It stops the session's stream, so it runs
after every other browser test (the `ends_stream` marker, see conftest)."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.elasticity.tick import slo_text
from orchestration.names import (
    elasticity_sensor_name,
    layout_asset_key,
    op_name,
    policy_asset_key,
    policy_job_name,
    resize_job_name,
    stop_job_name,
    stream_job_name,
)
from tests.browser.stack import ENDED, STREAM, Stack, wait_for
from tests.browser.ui import launch_from_launchpad, metadata_value, open_skipped_tick_citing, parked, switch_sensor
from tests.e2e.test_elasticity_stack import sensor_ticks

pytestmark = [pytest.mark.browser, pytest.mark.ends_stream, pytest.mark.timeout(1800)]

LAYOUT_ASSET = layout_asset_key(STREAM).to_user_string()
POLICY_ASSET = policy_asset_key(STREAM).to_user_string()
SENSOR = elasticity_sensor_name(STREAM)
SCALED_WITHIN_S = 180.0
"""The issue's bar: from the launch in the UI to the new layout shown there."""
NEW_SLO_S = 7.25
"""An SLO no default has, so the reason that cites it can only come from this change."""


def test_newcomer_scales_changes_the_slo_sees_it_cited_and_stops_the_stream(page, shoot, stack):
    stack.stop_elasticity()  # the walk's rescale is the newcomer's, not the loop's
    scale_from_the_launchpad(page, shoot, stack)
    change_the_slo(page, shoot, stack)
    see_the_new_slo_cited(page, shoot, stack)
    stop_the_stream(page, shoot, stack)


def scale_from_the_launchpad(page, shoot, stack: Stack) -> None:
    target = len(stack.committed_channels()) + 1
    started = time.monotonic()
    config = (
        f"ops:\n  {op_name(layout_asset_key(STREAM))}:\n    config:\n"
        f"      target: {{op: scale_to, channels: {target}}}\n      reason: a newcomer's first rescale\n"
    )
    run_id = launch_from_launchpad(page, resize_job_name(STREAM), config)
    with parked(page):
        stack.wait_for_success(run_id, timeout_s=SCALED_WITHIN_S, name="newcomer-scale")
    page.goto(f"/assets/{LAYOUT_ASSET}?view=events")
    expect(page.get_by_text("Materialized in run").first).to_be_visible()
    assert metadata_value(page, "channels_after") == str(target)
    took = time.monotonic() - started
    assert took <= SCALED_WITHIN_S, f"the rescale showed in the UI after {took:.0f} s"
    assert len(stack.committed_channels()) == target
    shoot("newcomer-scaled")


def change_the_slo(page, shoot, stack: Stack) -> None:
    # Explain-only: every tick then skips with the controller's sentence, which cites the SLO.
    config = (
        f"ops:\n  {op_name(policy_asset_key(STREAM))}:\n    config:\n"
        f"      slo_s: {NEW_SLO_S}\n      auto_rescale: false\n      note: a newcomer's SLO\n"
    )
    run_id = launch_from_launchpad(page, policy_job_name(STREAM), config)
    with parked(page):
        stack.wait_for_success(run_id, timeout_s=480, name="newcomer-slo")
    page.goto(f"/assets/{POLICY_ASSET}?view=events")
    expect(page.get_by_text("Materialized in run").first).to_be_visible()
    assert float(metadata_value(page, "slo_ms").replace(",", "")) == NEW_SLO_S * 1000
    shoot("newcomer-slo-changed")


def see_the_new_slo_cited(page, shoot, stack: Stack) -> None:
    cited = slo_text(ElasticityPolicy(slo_s=NEW_SLO_S))
    switch_sensor(page, SENSOR, running=True)
    try:
        with parked(page):  # back on the sensor's page, freshly loaded, once the tick is there
            wait_for(
                f"a tick whose reason cites {cited}",
                lambda: any(cited in (t["skipReason"] or "") for t in sensor_ticks(stack.port, SENSOR)),
                300,
                poll_s=5,
            )
        dialog = open_skipped_tick_citing(page, cited)
        shoot("newcomer-slo-cited")
        dialog.get_by_role("button", name="Close").click()
    finally:
        stack.set_sensor(SENSOR, running=False)


def stop_the_stream(page, shoot, stack: Stack) -> None:
    config = f"ops:\n  stop_{STREAM}_stream:\n    config:\n      note: the newcomer is done\n"
    run_id = launch_from_launchpad(page, stop_job_name(STREAM), config)
    with parked(page):
        stack.wait_for_success(run_id, timeout_s=480, name="newcomer-stop")
        assert stack.wait_for_status(stack.stream_run_id, ENDED, timeout_s=240) == "CANCELED"
    page.goto(f"/locations/esp/jobs/{stream_job_name(STREAM)}/runs")
    expect(page.get_by_text(re.compile("Canceled", re.IGNORECASE)).first).to_be_visible()
    shoot("newcomer-stream-stopped")
