"""The operator guide's example (docs/operators.md) runs as written: the top-k-per-user
operator survives a split, a scale-out and a replay with the outputs the guide states."""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "operators.md"


def test_the_guides_example_runs() -> None:
    (block,) = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)
    exec(compile(block, str(GUIDE), "exec"), {"__name__": "guide"})
