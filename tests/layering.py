"""The dependency rules between esp's packages, checked by reading imports (AST, not grep)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

# package -> top-level modules it must never import
FORBIDDEN: dict[str, frozenset[str]] = {
    "elasticity": frozenset(
        {"pyspark", "dagster", "dagster_pyspark", "dagster_webserver", "pipelines", "orchestration", "infra"}
    ),
    "pipelines": frozenset({"dagster", "dagster_pyspark", "dagster_webserver", "orchestration", "infra"}),
    "orchestration": frozenset({"infra"}),
}


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
    banned = FORBIDDEN[package]
    result = []
    for file in sorted((root / package).rglob("*.py")):
        for line, module in imported_modules(file.read_text()):
            if module in banned:
                result.append(Violation(file.relative_to(root), line, module))
    return result
