"""`esp stream run`'s snapshot options: a bad choice is a one-line error before anything starts."""

from __future__ import annotations

from typer.testing import CliRunner

from orchestration.cli.main import app


def test_an_unknown_snapshot_policy_is_refused_by_name(tmp_path) -> None:
    result = CliRunner().invoke(app, ["stream", "run", "--root", str(tmp_path), "--snapshots", "sometimes"])
    assert result.exit_code == 2
    assert "sometimes" in result.output and "--snapshots" in result.output


def test_a_recovery_bound_on_the_fixed_policy_is_refused(tmp_path) -> None:
    result = CliRunner().invoke(
        app, ["stream", "run", "--root", str(tmp_path), "--snapshots", "fixed", "--max-recovery", "2"]
    )
    assert result.exit_code == 2
    assert "adaptive" in result.output
