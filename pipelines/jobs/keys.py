"""The ad-click state key: one string per (campaign, window start), and back.

A key is `<campaign_id>|<window_start_ms>`. The window start is an integer, which holds no
`|`, so a key splits at its *last* `|`: a campaign id may hold any character, `|` included, and
two different (campaign, window) pairs never share a key. The format is the one stream state
always had, so existing state reads the same; only the split changed (it took the first `|`,
so a campaign id holding `|` failed its batch or landed in another campaign's window).
"""

from __future__ import annotations

SEPARATOR = "|"


def window_key(campaign_id: str, window_start_ms: int) -> str:
    """The state key of a campaign's window."""
    return f"{campaign_id}{SEPARATOR}{int(window_start_ms)}"


def split_window_key(key: str) -> tuple[str, int]:
    """(campaign id, window start ms) of a state key: the inverse of `window_key`."""
    campaign_id, separator, start = key.rpartition(SEPARATOR)
    if not separator:
        raise ValueError(f"not an ad-click state key (no {SEPARATOR!r}): {key[:80]!r}")
    return campaign_id, int(start)
