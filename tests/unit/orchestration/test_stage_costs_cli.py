"""`esp stream run --stage-service-ms stage=ms`: a stage's own cost knob, parsed, or refused in one line."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from orchestration.cli.main import app
from orchestration.cli.stream import _stage_costs


def test_stage_costs_are_parsed_per_stage() -> None:
    assert _stage_costs(["buckets=8", " pages = 2.5"]) == {"buckets": 8.0, "pages": 2.5}
    assert _stage_costs(None) is None and _stage_costs([]) is None


@pytest.mark.parametrize("given", ["buckets", "buckets=fast", "=3"])
def test_a_malformed_stage_cost_is_refused_by_name(given: str) -> None:
    with pytest.raises(typer.BadParameter, match="is not stage=ms"):
        _stage_costs([given])


def test_the_command_line_refuses_a_malformed_stage_cost_before_anything_starts(tmp_path) -> None:
    result = CliRunner().invoke(app, ["stream", "run", "--root", str(tmp_path), "--stage-service-ms", "buckets"])
    assert result.exit_code == 2
    assert "stage=ms" in result.output
