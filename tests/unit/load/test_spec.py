"""`LoadSpec`: defaults, descriptions, validation and the producer count."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pipelines.load import LoadSpec


def test_every_field_has_a_default_and_a_description():
    for name, info in LoadSpec.model_fields.items():
        assert not info.is_required(), name
        assert info.description and len(info.description) > 10, name


def test_invalid_values_are_rejected_with_the_field_named():
    with pytest.raises(ValidationError, match="profile"):
        LoadSpec(profile="sawtooth")
    with pytest.raises(ValidationError, match="zipf_s"):
        LoadSpec(zipf_s=0)
    with pytest.raises(ValidationError, match="unknown_field"):
        LoadSpec(unknown_field=1)


def test_process_count_follows_the_peak_when_automatic():
    assert LoadSpec(processes=3).producer_processes() == 3
    assert LoadSpec(processes=0, peak_rate=10, process_capacity_rps=100).producer_processes() == 1
    assert LoadSpec(processes=0, peak_rate=250, process_capacity_rps=100).producer_processes() == 3


def test_default_base_rate_depends_on_the_profile():
    assert LoadSpec(profile="constant", peak_rate=100).effective_base_rate == 100
    assert LoadSpec(profile="esault", peak_rate=100).effective_base_rate == pytest.approx(5)
    assert LoadSpec(profile="square", peak_rate=100, base_rate=0).effective_base_rate == 0
