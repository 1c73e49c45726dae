"""elasticity is pure, pipelines never reach into Dagster, nothing imports infra."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.layering import FORBIDDEN, violations

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_the_dependency_direction(package):
    found = violations(REPO_ROOT, package)
    assert not found, "forbidden imports:\n" + "\n".join(map(str, found))


def test_the_check_catches_pyspark_in_elasticity(tmp_path):
    (tmp_path / "elasticity" / "sub").mkdir(parents=True)
    (tmp_path / "elasticity" / "sub" / "fast.py").write_text("import numpy\nfrom pyspark.sql import functions\n")
    found = violations(tmp_path, "elasticity")
    assert [(v.line, v.module) for v in found] == [(2, "pyspark")]


def test_the_check_catches_dagster_in_pipelines(tmp_path):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "job.py").write_text("def f():\n    import dagster\n")
    assert [v.module for v in violations(tmp_path, "pipelines")] == ["dagster"]
