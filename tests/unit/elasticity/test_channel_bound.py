"""The hard upper bound on channels (`MAX_CHANNELS`) and malformed layout documents: clear LayoutErrors,
never a crash deep inside or a driver exhausted by 100,000 channels."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from elasticity.layout import INT64_MAX, LAYOUT_FORMAT, MAX_CHANNELS, Layout, LayoutError
from orchestration.elasticity.policy import ElasticityPolicy
from pipelines.streams.control import RescaleTarget


def test_uniform_and_scale_out_refuse_more_than_max_channels():
    with pytest.raises(LayoutError, match="MAX_CHANNELS"):
        Layout.uniform(100_000)
    with pytest.raises(LayoutError, match="MAX_CHANNELS"):
        Layout.uniform(MAX_CHANNELS, tokens_per_channel=1).scale_out(1)
    with pytest.raises(LayoutError, match="at least one channel"):
        Layout.uniform(0)


def test_a_layout_file_with_too_many_owners_is_refused():
    step = (1 << 64) // (MAX_CHANNELS + 1)
    bounds = [-(1 << 63) + step * (i + 1) for i in range(MAX_CHANNELS)] + [INT64_MAX]
    document = {"format": LAYOUT_FORMAT, "epoch": 1, "bounds": bounds, "owners": list(range(MAX_CHANNELS + 1))}
    with pytest.raises(LayoutError, match="MAX_CHANNELS"):
        Layout.from_json(json.dumps(document))


@pytest.mark.parametrize(
    "document",
    [
        [1, 2],
        {"format": LAYOUT_FORMAT, "epoch": 1},
        {"format": LAYOUT_FORMAT, "epoch": "x", "bounds": [], "owners": []},
    ],
)
def test_malformed_layout_documents_are_layout_errors(document):
    with pytest.raises(LayoutError):
        Layout.from_dict(document)


def test_rescale_targets_and_the_policy_are_bounded():
    with pytest.raises(ValidationError):
        RescaleTarget(op="scale_to", channels=100_000)
    with pytest.raises(ValidationError):
        ElasticityPolicy(max_channels=MAX_CHANNELS + 1)
    assert RescaleTarget(op="scale_to", channels=MAX_CHANNELS).channels == MAX_CHANNELS
