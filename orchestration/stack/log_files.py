"""Bounded log files of the processes esp starts: each start gets a fresh file, older starts' files
are kept as `<name>.1` (the previous start) to `<name>.<keep>`, anything older is deleted."""

from __future__ import annotations

from pathlib import Path

CONSOLE_LOGS_KEPT = 3
"""Previous starts' console logs kept beside the current one (`console.log.1` is the last start)."""


def rotate(path: Path, keep: int = CONSOLE_LOGS_KEPT) -> None:
    """Shift `path` to `path.1`, `path.1` to `path.2`, ... dropping `path.<keep>`; then `path` is free
    for a new start. A crash midway leaves at most one start's log missing, never an unbounded file."""
    path.with_name(f"{path.name}.{keep}").unlink(missing_ok=True)
    for n in range(keep - 1, 0, -1):
        older = path.with_name(f"{path.name}.{n}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{n + 1}"))
    if keep > 0 and path.exists():
        path.replace(path.with_name(f"{path.name}.1"))
    path.unlink(missing_ok=True)
