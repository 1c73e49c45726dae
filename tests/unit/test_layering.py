"""elasticity is pure, pipelines never reach into Dagster, nothing imports infra, no import cycle."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.layering import FORBIDDEN, import_cycle, violations

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


def test_the_product_never_imports_the_benchmarks_except_the_command_line_root(tmp_path):
    (tmp_path / "orchestration" / "cli").mkdir(parents=True)
    (tmp_path / "orchestration" / "cli" / "main.py").write_text("from benchmarks.cli import bench_app\n")
    (tmp_path / "orchestration" / "assets.py").write_text("from benchmarks import ring\n")
    assert [str(v.file) for v in violations(tmp_path, "orchestration")] == ["orchestration/assets.py"]


def test_esp_has_no_import_cycle():
    assert import_cycle(REPO_ROOT) is None


def _write_modules(root: Path, modules: dict[str, str]) -> None:
    for name, source in modules.items():
        file = root / (name.replace(".", "/") + ".py")
        file.parent.mkdir(parents=True, exist_ok=True)
        for package in file.relative_to(root).parents:
            if package != Path("."):
                (root / package / "__init__.py").touch()
        file.write_text(source)


def test_the_check_catches_a_cycle_hidden_in_a_function_level_import(tmp_path):
    _write_modules(
        tmp_path,
        {
            "orchestration.collector": "def files():\n    from orchestration.realizer import StreamFiles\n",
            "orchestration.realizer": "from orchestration.collector import files\n",
        },
    )
    cycle = import_cycle(tmp_path)
    assert cycle is not None
    assert set(cycle) == {"orchestration.collector", "orchestration.realizer"}


def test_the_check_catches_a_cycle_across_packages_and_relative_imports(tmp_path):
    _write_modules(
        tmp_path,
        {
            "pipelines.streams.files": "from . import spec\n",
            "pipelines.streams.spec": "from pipelines.streams import runner\n",
            "pipelines.streams.runner": "from .files import StreamFiles\n",
        },
    )
    assert set(import_cycle(tmp_path) or ()) == {
        "pipelines.streams.files",
        "pipelines.streams.spec",
        "pipelines.streams.runner",
    }


def test_a_submodule_import_is_not_a_cycle_through_its_package(tmp_path):
    _write_modules(
        tmp_path,
        {
            "elasticity.control.__init__": "from elasticity.control.controller import Controller\n",
            "elasticity.control.controller": "from elasticity.control.options import Options\n",
            "elasticity.control.options": "Options = int\n",
        },
    )
    assert import_cycle(tmp_path) is None
