"""Where esp's PNG plots go: beside the stream, on whatever filesystem its folder is (a local path,
`file://` or an object store), written in one atomic publish."""

from __future__ import annotations

import io
from os import PathLike, fspath
from typing import Any

from elasticity.state import Location


def publish_png(fig: Any, path: str | PathLike[str], dpi: int) -> bytes:
    """Render matplotlib figure `fig` and publish it at `path` (a path or URI); returns the PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    png = buffer.getvalue()
    folder, name = fspath(path).rsplit("/", 1)
    Location.of(folder or "/").publish_bytes(name, png, sealed=False)
    return png
