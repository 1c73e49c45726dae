"""Key distributions of a load: uniform or Zipf(s) draws over V items, and the word vocabulary.

Draws are numpy, seeded per block (see `records.py`), so a (spec, seed) always yields the same
items. Zipf is the truncated Zipf law over ranks 1..V (P(k) ~ 1/k^s), sampled by inverting its
CDF, so any s > 0 works (numpy's own zipf needs s > 1 and is unbounded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from pipelines.load.spec import DistributionName

# Syllables of the pseudo-words: a word is its index written in base len(SYLLABLES).
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
SYLLABLES: tuple[str, ...] = tuple(c + v for c in _CONSONANTS for v in _VOWELS)


def word_for(index: int) -> str:
    """The index-th word: distinct lowercase letters for every index, at least two syllables."""
    base = len(SYLLABLES)
    parts = []
    n = index
    while True:
        n, digit = divmod(n, base)
        parts.append(SYLLABLES[digit])
        if n == 0:
            break
    if len(parts) == 1:
        parts.append(SYLLABLES[0])  # keeps word 0 ("ba") distinct from 1-syllable words: all have >= 2
    return "".join(reversed(parts))


@lru_cache(maxsize=8)
def vocabulary(size: int) -> tuple[str, ...]:
    """V distinct words; word 0 is the most frequent under Zipf."""
    return tuple(word_for(i) for i in range(size))


@lru_cache(maxsize=8)
def encoded_vocabulary(size: int) -> tuple[bytes, ...]:
    """The vocabulary as UTF-8 bytes, encoded once (values are joined from these)."""
    return tuple(w.encode() for w in vocabulary(size))


def zipf_probabilities(size: int, s: float) -> np.ndarray:
    """P(rank k) for k = 1..size under the truncated Zipf law with exponent s."""
    weights = 1.0 / np.arange(1, size + 1, dtype=np.float64) ** s
    return weights / weights.sum()


@dataclass(frozen=True)
class KeySampler:
    """Draws item indices in [0, size) from a uniform or Zipf(s) distribution."""

    distribution: DistributionName
    size: int
    zipf_s: float = 1.1
    _cdf: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("a key distribution needs at least one item")
        if self.distribution == "zipf":
            cdf = np.cumsum(zipf_probabilities(self.size, self.zipf_s))
            cdf[-1] = 1.0  # guard against rounding leaving the last item unreachable
            object.__setattr__(self, "_cdf", cdf)
        elif self.distribution != "uniform":
            raise ValueError(f"unknown distribution {self.distribution!r}")

    def draw(self, rng: np.random.Generator, count: int | tuple[int, ...]) -> np.ndarray:
        """Item indices (int64) of the given shape."""
        if self._cdf is None:
            return rng.integers(0, self.size, size=count, dtype=np.int64)
        return np.searchsorted(self._cdf, rng.random(count), side="right").astype(np.int64)

    def probabilities(self) -> np.ndarray:
        """The exact probability of each item."""
        if self._cdf is None:
            return np.full(self.size, 1.0 / self.size)
        return np.diff(self._cdf, prepend=0.0)
