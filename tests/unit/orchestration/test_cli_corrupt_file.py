"""A damaged state file reaches the user of `esp` as one line naming it, with exit code 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from elasticity.layout import Layout
from elasticity.migration import LayoutRegistry
from elasticity.state import Location
from orchestration.cli.common import friendly_errors


def test_a_corrupt_layout_is_one_line_naming_the_file(tmp_path: Path, capsys) -> None:
    registry = LayoutRegistry(Location.of(str(tmp_path / "[elastic]")))  # brackets are not markup
    registry.initialize(Layout.uniform(2))
    pointer = tmp_path / "[elastic]" / "layout" / "current.json"
    pointer.write_bytes(pointer.read_bytes()[:-5])

    with pytest.raises(typer.Exit) as exited, friendly_errors():
        registry.committed()

    assert exited.value.exit_code == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("error: ")
    assert f"{pointer} is corrupt" in out and "Traceback" not in out
