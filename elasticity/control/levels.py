"""Gedik's P6 rapid-scaling levels: channel counts that grow super-linearly with the level index.

The sequence is 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, ... (powers of two and 1.5 x powers of two),
clipped to [min_channels, max_channels] with both bounds included, so that one decision moves
the stage by a constant factor (x1.33 or x1.5) whatever its size: settling from 2 to 768
channels takes ~15 levels instead of 766 steps. A channel count that is not a level (after a
split or merge) belongs to the highest level not above it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


def level_sequence(min_channels: int, max_channels: int) -> tuple[int, ...]:
    """Counts 2^k and 3 * 2^(k-1) within [min_channels, max_channels], bounds included."""
    counts: set[int] = {min_channels, max_channels}
    power = 1
    while power <= max_channels:
        for count in (power, power * 3 // 2):
            if min_channels <= count <= max_channels and count >= 1:
                counts.add(count)
        power *= 2
    return tuple(sorted(counts))


@dataclass(frozen=True)
class Levels:
    """The level ladder for one [min, max] channel range."""

    counts: tuple[int, ...]

    @classmethod
    def between(cls, min_channels: int, max_channels: int) -> Levels:
        return cls(level_sequence(min_channels, max_channels))

    @property
    def top(self) -> int:
        return len(self.counts) - 1

    def level_of(self, channels: int) -> int:
        """Index of the highest level whose count is <= channels (0 below the minimum)."""
        return max(0, bisect.bisect_right(self.counts, channels) - 1)

    def channels_at(self, level: int) -> int:
        return self.counts[max(0, min(level, self.top))]

    def level_covering(self, channels_needed: float) -> int:
        """Index of the smallest level with at least `channels_needed` channels (the top if none)."""
        return min(self.top, bisect.bisect_left(self.counts, channels_needed))
