"""The partition layout of the elastic stage: a consistent-hash ring of tokens -> channel, plus an epoch.

The ring covers the signed int64 hash space of `elasticity.hashing`. It is stored as sorted,
inclusive *upper bounds* (tokens) with one owner channel each; the last token is always
INT64_MAX, so the ring is cut there and every arc is a plain interval `[previous token + 1,
token]` (eSault's interval structure, seed 000). A key goes to the owner of the first token
>= its hash: one `np.searchsorted` per batch of hashes.

Placement is *balanced*, not random: `Layout.uniform(n)` gives every channel exactly 1/n of the
space in `tokens_per_channel` interleaved arcs, and every operation moves exact amounts of hash
space (we measured random (channel, replica) tokens: even 1024 tokens per channel leave
max/mean > 1.10 at N=64, and 64k tokens slow lookups). The operations, each returning the
layout of epoch + 1, are monotone — only the hash space the operation names changes owner:

- `scale_out(k)`: k new channels, each taking share/(N+k) from every existing channel, so an
  even layout stays even and exactly k/(N+k) of the space moves;
- `scale_in(k)`: the k highest channel ids (or named ones) give their arcs to the survivors in
  proportion to the survivors' shares; only the removed channels' keys move;
- `split(c)`: a new channel takes a fraction of channel c's arcs (only c's load is divided);
- `merge(c)`: each arc of c joins its ring successor (eSault's merge of neighbour intervals),
  or all of c goes to a named channel;
- `diff(old, new)`: exactly the hash ranges whose owner changes, as `HashRange`s.

Channel ids need not be dense (merges leave gaps). Spark wants channel c on partition c, so
`partition_of(c)` maps a layout's channels, in ascending id order, to dense indices 0..N-1
(and `lookup_partitions` routes straight to them). The mapping belongs to one epoch: after a
merge of channel 1 in {0, 1, 2}, channel 2 runs on partition 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
HASH_SPACE = 1 << 64
DEFAULT_TOKENS_PER_CHANNEL = 16
LAYOUT_FORMAT = "esp-layout/1"
MAX_CHANNELS = 1024
"""Hard upper bound on a layout's channels (each is a Spark task and a state store per batch;
beyond this a typo such as 100000 would exhaust the driver before it could fail clearly)."""


class LayoutError(ValueError):
    """An operation that cannot produce a valid layout (unknown channel, last channel, ...)."""


@dataclass(frozen=True)
class HashRange:
    """Hashes `start..end` (both inclusive) whose owner changes from `source` to `target`."""

    start: int
    end: int
    source: int
    target: int

    @property
    def size(self) -> int:
        return self.end - self.start + 1

    def to_json(self) -> list[int]:
        return [self.start, self.end, self.source, self.target]

    @classmethod
    def from_json(cls, raw: Sequence[int]) -> HashRange:
        start, end, source, target = (int(x) for x in raw)
        return cls(start, end, source, target)


@dataclass(frozen=True)
class _Arc:
    start: int
    end: int
    owner: int

    @property
    def size(self) -> int:
        return self.end - self.start + 1


class Layout:
    """An immutable ring: sorted inclusive upper bounds (last = INT64_MAX) and their owners."""

    __slots__ = ("epoch", "bounds", "owners", "channels", "origin", "_dense", "_dense_owners")

    def __init__(
        self,
        epoch: int,
        bounds: Sequence[int] | np.ndarray,
        owners: Sequence[int] | np.ndarray,
        origin: Mapping[str, Any] | None = None,
    ) -> None:
        arcs = _coalesce(_arcs_of(list(map(int, bounds)), list(map(int, owners))))
        self.epoch = int(epoch)
        self.bounds = np.array([a.end for a in arcs], dtype=np.int64)
        self.owners = np.array([a.owner for a in arcs], dtype=np.int32)
        self.channels: tuple[int, ...] = tuple(sorted({a.owner for a in arcs}))
        _check_channel_count(len(self.channels))
        self.origin: dict[str, Any] = dict(origin or {})
        self._dense = {c: i for i, c in enumerate(self.channels)}
        self._dense_owners = np.array([self._dense[int(o)] for o in self.owners], dtype=np.int32)
        self.bounds.flags.writeable = False
        self.owners.flags.writeable = False

    # ---- construction -------------------------------------------------------------------
    def renumbered(self, epoch: int) -> Layout:
        """The same ring under another epoch number (epochs are assigned by the registry)."""
        return Layout(epoch, self.bounds, self.owners, origin=self.origin)

    @classmethod
    def uniform(cls, n_channels: int, tokens_per_channel: int = DEFAULT_TOKENS_PER_CHANNEL, epoch: int = 0) -> Layout:
        """Channels 0..n-1, each owning exactly 1/n of the space in interleaved equal arcs."""
        if n_channels < 1 or tokens_per_channel < 1:
            raise LayoutError("a layout needs at least one channel and one token per channel")
        _check_channel_count(n_channels)
        n_arcs = n_channels * tokens_per_channel
        base, extra = divmod(HASH_SPACE, n_arcs)
        bounds, owners, end = [], [], INT64_MIN - 1
        for i in range(n_arcs):
            end += base + (1 if i < extra else 0)
            bounds.append(end)
            owners.append(i % n_channels)
        return cls(epoch, bounds, owners, origin={"op": "uniform", "channels": n_channels})

    # ---- routing ------------------------------------------------------------------------
    @property
    def n_channels(self) -> int:
        return len(self.channels)

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """Channel id of each int64 hash (vectorized)."""
        return self.owners[np.searchsorted(self.bounds, np.asarray(hashes, dtype=np.int64), side="left")]

    def lookup_partitions(self, hashes: np.ndarray) -> np.ndarray:
        """Dense partition index (0..N-1) of each int64 hash; see `partition_of`."""
        return self._dense_owners[np.searchsorted(self.bounds, np.asarray(hashes, dtype=np.int64), side="left")]

    def owner(self, key_hash: int) -> int:
        """Channel id of one hash."""
        return int(self.owners[int(np.searchsorted(self.bounds, np.int64(key_hash), side="left"))])

    def partition_of(self, channel: int) -> int:
        """Dense Spark partition index of a channel: its rank among this layout's channel ids."""
        try:
            return self._dense[channel]
        except KeyError:
            raise LayoutError(f"channel {channel} is not in layout epoch {self.epoch}") from None

    def partition_map(self) -> dict[int, int]:
        """channel id -> dense partition index, for every channel of this epoch."""
        return dict(self._dense)

    def shares(self) -> dict[int, float]:
        """Exact fraction of the hash space each channel owns."""
        return {c: n / HASH_SPACE for c, n in _share_sizes(self._arcs()).items()}

    def ranges(self) -> list[tuple[int, int, int]]:
        """Every arc as (start, end, channel), inclusive, in hash order (for JVM-side routing)."""
        return [(a.start, a.end, a.owner) for a in self._arcs()]

    def _arcs(self) -> list[_Arc]:
        return _layout_arcs(self)

    # ---- serialization ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": LAYOUT_FORMAT,
            "epoch": self.epoch,
            "bounds": [int(b) for b in self.bounds],
            "owners": [int(o) for o in self.owners],
            "origin": self.origin,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Layout:
        if not isinstance(raw, Mapping) or raw.get("format") != LAYOUT_FORMAT:
            found = raw.get("format") if isinstance(raw, Mapping) else type(raw).__name__
            raise LayoutError(f"not an {LAYOUT_FORMAT} document: format={found!r}")
        missing = [key for key in ("epoch", "bounds", "owners") if key not in raw]
        if missing:
            raise LayoutError(f"layout document lacks {', '.join(missing)}")
        try:
            return cls(raw["epoch"], raw["bounds"], raw["owners"], origin=raw.get("origin"))
        except (TypeError, ValueError, OverflowError) as error:
            if isinstance(error, LayoutError):
                raise
            raise LayoutError(f"layout document has a malformed epoch, bounds or owners: {error}") from None

    @classmethod
    def from_json(cls, text: str) -> Layout:
        return cls.from_dict(json.loads(text))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Layout):
            return NotImplemented
        return (
            self.epoch == other.epoch
            and np.array_equal(self.bounds, other.bounds)
            and np.array_equal(self.owners, other.owners)
            and self.origin == other.origin
        )

    def __hash__(self) -> int:
        return hash((self.epoch, self.bounds.tobytes(), self.owners.tobytes()))

    def __repr__(self) -> str:
        return f"Layout(epoch={self.epoch}, channels={list(self.channels)}, arcs={len(self.bounds)})"

    # ---- operations (each returns epoch + 1) -----------------------------------------------
    def scale_out(self, k: int = 1) -> Layout:
        return scale_out(self, k)

    def scale_in(self, k: int = 1, remove: Sequence[int] | None = None) -> Layout:
        return scale_in(self, k, remove)

    def split(self, channel: int, fraction: float = 0.5) -> Layout:
        return split(self, channel, fraction)

    def merge(self, channel: int, into: int | None = None) -> Layout:
        return merge(self, channel, into)


def _check_channel_count(n_channels: int) -> None:
    if n_channels > MAX_CHANNELS:
        raise LayoutError(f"{n_channels} channels is more than esp's limit of MAX_CHANNELS = {MAX_CHANNELS}")


# ---- arc helpers ------------------------------------------------------------------------------
def _layout_arcs(layout: Layout) -> list[_Arc]:
    return _arcs_of([int(b) for b in layout.bounds], [int(o) for o in layout.owners])


def _arcs_of(bounds: list[int], owners: list[int]) -> list[_Arc]:
    if not bounds or len(bounds) != len(owners):
        raise LayoutError("bounds and owners must be non-empty and of equal length")
    if bounds[-1] != INT64_MAX:
        raise LayoutError("the last token must be INT64_MAX so the ring covers the whole hash space")
    arcs, start = [], INT64_MIN
    for end, owner in zip(bounds, owners):
        if end < start:
            raise LayoutError("tokens must be strictly increasing")
        arcs.append(_Arc(start, end, owner))
        start = end + 1
    return arcs


def _coalesce(arcs: Iterable[_Arc]) -> list[_Arc]:
    """Join adjacent arcs of one owner: the canonical form, so equal rings compare equal."""
    out: list[_Arc] = []
    for arc in arcs:
        if out and out[-1].owner == arc.owner:
            out[-1] = _Arc(out[-1].start, arc.end, arc.owner)
        else:
            out.append(arc)
    return out


def _share_sizes(arcs: Iterable[_Arc]) -> dict[int, int]:
    sizes: dict[int, int] = {}
    for arc in arcs:
        sizes[arc.owner] = sizes.get(arc.owner, 0) + arc.size
    return sizes


def _carve(arcs: list[_Arc], quotas: Mapping[int, list[tuple[int, int]]]) -> list[_Arc]:
    """Hand exact amounts of each donor's space to recipients, walking its arcs in ring order.

    `quotas[donor]` lists (recipient, amount). Each donor arc is cut from its start; at most one
    cut per (donor, recipient), so a rescale adds O(N) tokens, not O(tokens).
    """
    pending = {donor: [list(q) for q in qs if q[1] > 0] for donor, qs in quotas.items()}
    out: list[_Arc] = []
    for arc in arcs:
        queue = pending.get(arc.owner)
        start = arc.start
        while queue and start <= arc.end:
            recipient, need = queue[0]
            take = min(need, arc.end - start + 1)
            out.append(_Arc(start, start + take - 1, recipient))
            start += take
            queue[0][1] -= take
            if queue[0][1] == 0:
                queue.pop(0)
        if start <= arc.end:
            out.append(_Arc(start, arc.end, arc.owner))
    leftover = {d: q for d, q in pending.items() if q}
    if leftover:
        raise LayoutError(f"donors lack the space asked of them: {leftover}")
    return out


def _next(layout: Layout, arcs: list[_Arc], op: dict[str, Any]) -> Layout:
    op = {**op, "parent_epoch": layout.epoch}
    merged = _coalesce(arcs)
    return Layout(layout.epoch + 1, [a.end for a in merged], [a.owner for a in merged], origin=op)


def _free_ids(channels: Iterable[int], k: int) -> list[int]:
    """The k lowest unused channel ids (reusing ids keeps them near-dense)."""
    used, candidate = set(channels), 0
    found: list[int] = []
    while len(found) < k:
        if candidate not in used:
            found.append(candidate)
        candidate += 1
    return found


def _require(layout: Layout, channel: int) -> None:
    if channel not in layout.channels:
        raise LayoutError(f"channel {channel} is not in layout epoch {layout.epoch}")


# ---- operations ---------------------------------------------------------------------------------
def scale_out(layout: Layout, k: int = 1) -> Layout:
    """k new channels; each existing channel gives share/(N+k) of its space to each of them."""
    if k < 1:
        raise LayoutError("scale out by at least one channel")
    _check_channel_count(len(layout.channels) + k)
    arcs = _layout_arcs(layout)
    sizes = _share_sizes(arcs)
    new_ids = _free_ids(layout.channels, k)
    total = len(sizes) + k
    quotas = {donor: [(new, size // total) for new in new_ids] for donor, size in sizes.items()}
    return _next(layout, _carve(arcs, quotas), {"op": "scale_out", "k": k, "added": new_ids})


def scale_in(layout: Layout, k: int = 1, remove: Sequence[int] | None = None) -> Layout:
    """Remove k channels (the highest ids unless named), spreading their space over the rest
    in proportion to each survivor's share, so relative balance is kept."""
    removed = sorted(remove) if remove is not None else list(layout.channels[-k:]) if k >= 1 else []
    if not removed or len(set(removed)) != len(removed):
        raise LayoutError("scale in needs at least one distinct channel to remove")
    for channel in removed:
        _require(layout, channel)
    survivors = [c for c in layout.channels if c not in set(removed)]
    if not survivors:
        raise LayoutError("cannot remove every channel")
    arcs = _layout_arcs(layout)
    sizes = _share_sizes(arcs)
    surviving_space = sum(sizes[c] for c in survivors)
    quotas: dict[int, list[tuple[int, int]]] = {}
    for donor in removed:
        amounts = [sizes[donor] * sizes[s] // surviving_space for s in survivors]
        amounts[-1] += sizes[donor] - sum(amounts)  # rounding dust: the donor must end empty
        quotas[donor] = list(zip(survivors, amounts))
    return _next(layout, _carve(arcs, quotas), {"op": "scale_in", "k": len(removed), "removed": removed})


def split(layout: Layout, channel: int, fraction: float = 0.5) -> Layout:
    """Targeted split: a new channel takes `fraction` of `channel`'s space, from its arcs only."""
    _require(layout, channel)
    if not 0.0 < fraction < 1.0:
        raise LayoutError("split fraction must be in (0, 1)")
    arcs = _layout_arcs(layout)
    size = _share_sizes(arcs)[channel]
    amount = int(size * fraction)
    if amount < 1 or amount >= size:
        raise LayoutError(f"channel {channel} is too small to split at {fraction}")
    (new_id,) = _free_ids(layout.channels, 1)
    carved = _carve(arcs, {channel: [(new_id, amount)]})
    return _next(layout, carved, {"op": "split", "channel": channel, "added": [new_id], "fraction": fraction})


def merge(layout: Layout, channel: int, into: int | None = None) -> Layout:
    """Remove `channel`: each of its arcs joins the next arc along the ring (wrapping at
    INT64_MAX), or, if `into` is given, all of them go to that channel."""
    _require(layout, channel)
    if layout.n_channels < 2:
        raise LayoutError("cannot merge the only channel")
    if into is not None:
        _require(layout, into)
        if into == channel:
            raise LayoutError("cannot merge a channel into itself")
    arcs = _layout_arcs(layout)
    out = []
    for i, arc in enumerate(arcs):
        if arc.owner != channel:
            out.append(arc)
            continue
        target = into if into is not None else _successor_owner(arcs, i, channel)
        out.append(_Arc(arc.start, arc.end, target))
    op = {"op": "merge", "channel": channel, "removed": [channel]}
    if into is not None:
        op["into"] = into
    return _next(layout, out, op)


def _successor_owner(arcs: list[_Arc], index: int, skip: int) -> int:
    for step in range(1, len(arcs) + 1):
        owner = arcs[(index + step) % len(arcs)].owner
        if owner != skip:
            return owner
    raise LayoutError("no neighbour to merge into")


# ---- comparing layouts --------------------------------------------------------------------------
def diff(old: Layout, new: Layout) -> list[HashRange]:
    """Exactly the hash ranges whose owner differs between `old` and `new`, in hash order,
    adjacent pieces with the same (source, target) joined."""
    bounds = np.union1d(old.bounds, new.bounds)  # every arc boundary of either ring
    starts = np.concatenate([np.array([INT64_MIN], dtype=np.int64), bounds[:-1] + 1])
    before, after = old.lookup(bounds), new.lookup(bounds)
    changed = np.flatnonzero(before != after)
    out: list[HashRange] = []
    for i in changed:
        start, end, src, dst = int(starts[i]), int(bounds[i]), int(before[i]), int(after[i])
        last = out[-1] if out else None
        if last and last.end + 1 == start and (last.source, last.target) == (src, dst):
            out[-1] = HashRange(last.start, end, src, dst)
        else:
            out.append(HashRange(start, end, src, dst))
    return out


def moved_space_fraction(ranges: Iterable[HashRange]) -> float:
    """Share of the hash space covered by `ranges` (the expected share of keys that move)."""
    return sum(r.size for r in ranges) / HASH_SPACE


def ideal_moved_fraction(old: Layout, new: Layout) -> float:
    """The least share of keys any placement must move to go from N to N' channels:
    |N' - N| / max(N, N') (Gedik et al.'s 1/N' for one added channel)."""
    n_old, n_new = old.n_channels, new.n_channels
    return abs(n_new - n_old) / max(n_old, n_new)
