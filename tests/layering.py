"""The dependency rules between esp's packages, checked by reading imports (AST, not grep).

Two rules: the direction between packages (`FORBIDDEN`), and no import cycle between esp's
modules (`import_cycle`), function-level (lazy) imports included: a lazy import hides a cycle
from Python at import time, not from the design.
"""

from __future__ import annotations

import ast
import graphlib
from dataclasses import dataclass
from pathlib import Path

# package -> top-level modules it must never import
FORBIDDEN: dict[str, frozenset[str]] = {
    "elasticity": frozenset(
        {
            "pyspark",
            "dagster",
            "dagster_pyspark",
            "dagster_webserver",
            "pipelines",
            "orchestration",
            "benchmarks",
            "infra",
            "examples",
        }
    ),
    "pipelines": frozenset(
        {"dagster", "dagster_pyspark", "dagster_webserver", "orchestration", "benchmarks", "infra", "examples"}
    ),
    # User jobs: written against the public API (pipelines.api, elasticity.operators) only.
    "examples": frozenset({"dagster", "dagster_pyspark", "dagster_webserver", "orchestration", "benchmarks", "infra"}),
    "orchestration": frozenset({"benchmarks", "infra"}),
    "benchmarks": frozenset({"infra"}),
}

# The command line's root mounts `esp bench`: the one product module allowed to import benchmarks.
COMPOSITION_ROOTS: frozenset[Path] = frozenset({Path("orchestration/cli/main.py")})

# esp's own packages: the modules whose import graph must have no cycle.
ESP_PACKAGES = ("elasticity", "pipelines", "orchestration", "benchmarks")


@dataclass(frozen=True)
class Violation:
    file: Path
    line: int
    module: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} imports {self.module}"


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, top-level module) for every absolute import in the source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def violations(root: Path, package: str) -> list[Violation]:
    result = []
    for file in sorted((root / package).rglob("*.py")):
        allowed = {"benchmarks"} if file.relative_to(root) in COMPOSITION_ROOTS else set()
        banned = FORBIDDEN[package] - allowed
        for line, module in imported_modules(file.read_text()):
            if module in banned:
                result.append(Violation(file.relative_to(root), line, module))
    return result


def module_name(root: Path, file: Path) -> str:
    """`a/b/c.py` -> `a.b.c`; a package's `__init__.py` is the package itself."""
    parts = file.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_names(source: str, importer: str, is_package: bool) -> list[str]:
    """Every module name the source may import, at any depth (functions included), relative ones resolved."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = importer.split(".")[: len(importer.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from a.b import c` imports the submodule a.b.c when there is one, else a name of a.b.
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return names


def import_graph(root: Path, packages: tuple[str, ...] = ESP_PACKAGES) -> dict[str, set[str]]:
    """module -> the esp modules it imports. A submodule import is not counted as one of its parents."""
    files = {module_name(root, f): f for package in packages for f in sorted((root / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, file in files.items():
        imported = _imported_names(file.read_text(), module, file.name == "__init__.py")
        graph[module] = {name for name in imported if name in files and name != module}
    return graph


def import_cycle(root: Path, packages: tuple[str, ...] = ESP_PACKAGES) -> list[str] | None:
    """One import cycle between esp's modules (first module repeated at the end), or None."""
    try:
        tuple(graphlib.TopologicalSorter(import_graph(root, packages)).static_order())
    except graphlib.CycleError as error:
        cycle: list[str] = list(error.args[1])
        return cycle
    return None
