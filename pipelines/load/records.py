"""The records of a load: word-count lines and Yahoo-benchmark-like ad events, in seeded blocks.

Content is generated in fixed-size *blocks*: block b holds records [b*B, (b+1)*B) and is drawn
from its own generator seeded by (seed, b). So the records do not depend on how many producer
processes share the work (process i takes blocks i, i+P, i+2P, ...), and the exact counts of
the first N records are a pure function of (spec, N): `expected_counts`.

Counts are what a correct job must compute from the records: occurrences of each word (words),
or view events per campaign (ads, the Yahoo benchmark's aggregate without windows).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from pipelines.load.keys import KeySampler, encoded_vocabulary, vocabulary
from pipelines.load.spec import LoadSpec

AD_TYPES: tuple[str, ...] = ("banner", "modal", "sponsored-search", "mail", "mobile")
EVENT_TYPES: tuple[str, ...] = ("view", "click", "purchase")
VIEW = EVENT_TYPES.index("view")
USER_POOL = 100  # distinct users and pages, as in the Yahoo streaming benchmark's generator
PAGE_POOL = 100
_CATALOGUE_STREAM = 0xAD  # seeds the ad/campaign/user/page ids apart from the per-block draws


def _uuid_strings(raw: bytes) -> list[str]:
    """UUID-formatted strings from 16 random bytes each (faster than uuid.UUID per event)."""
    out = []
    for i in range(0, len(raw), 16):
        h = raw[i : i + 16].hex()
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return out


@dataclass(frozen=True)
class AdCatalogue:
    """The fixed ids of the ads kind: ads, the campaign of each ad, users, pages."""

    ad_ids: tuple[str, ...]
    campaign_ids: tuple[str, ...]
    campaign_of_ad: np.ndarray  # ad index -> campaign index
    user_ids: tuple[str, ...]
    page_ids: tuple[str, ...]

    def ad_to_campaign(self) -> dict[str, str]:
        """ad_id -> campaign_id, the join table of the Yahoo benchmark."""
        return {ad: self.campaign_ids[c] for ad, c in zip(self.ad_ids, self.campaign_of_ad.tolist(), strict=True)}


@lru_cache(maxsize=8)
def _catalogue(seed: int, campaigns: int, ads_per_campaign: int) -> AdCatalogue:
    rng = np.random.default_rng([seed, _CATALOGUE_STREAM])
    ads = campaigns * ads_per_campaign
    return AdCatalogue(
        ad_ids=tuple(_uuid_strings(rng.bytes(16 * ads))),
        campaign_ids=tuple(_uuid_strings(rng.bytes(16 * campaigns))),
        campaign_of_ad=rng.permutation(ads) // ads_per_campaign,  # a fixed, shuffled ad -> campaign map
        user_ids=tuple(_uuid_strings(rng.bytes(16 * USER_POOL))),
        page_ids=tuple(_uuid_strings(rng.bytes(16 * PAGE_POOL))),
    )


def ad_catalogue(spec: LoadSpec) -> AdCatalogue:
    """The ads, campaigns, users and pages of an ads load (fixed by the seed)."""
    return _catalogue(spec.seed, spec.campaigns, spec.ads_per_campaign)


@dataclass(frozen=True)
class Block:
    """The seeded draws of records [first, first + size); values are encoded on demand."""

    first: int
    items: np.ndarray  # words: (n, W) word indices; ads: (n,) ad indices
    event_types: np.ndarray | None = None  # ads: (n,) index into EVENT_TYPES
    ad_types: np.ndarray | None = None
    users: np.ndarray | None = None
    pages: np.ndarray | None = None
    late: np.ndarray | None = None  # ads: (n,) bool
    event_ids: tuple[str, ...] | None = None

    @property
    def size(self) -> int:
        return int(self.items.shape[0])


def block_count(spec: LoadSpec, records: int) -> int:
    return math.ceil(records / spec.block_records)


def make_block(spec: LoadSpec, sampler: KeySampler, index: int, size: int | None = None) -> Block:
    """Block `index`, optionally cut to its first `size` records (the last block of a pre-load)."""
    n = spec.block_records if size is None else size
    rng = np.random.default_rng([spec.seed, index])
    first = index * spec.block_records
    if spec.kind == "words":
        return Block(first=first, items=sampler.draw(rng, (spec.block_records, spec.words_per_line))[:n])
    full = spec.block_records  # always draw a full block, so a cut block is a prefix of the full one
    return Block(
        first=first,
        items=sampler.draw(rng, full)[:n],
        event_types=rng.integers(0, len(EVENT_TYPES), full)[:n],
        ad_types=rng.integers(0, len(AD_TYPES), full)[:n],
        users=rng.integers(0, USER_POOL, full)[:n],
        pages=rng.integers(0, PAGE_POOL, full)[:n],
        late=(rng.random(full) < spec.late_fraction)[:n],
        event_ids=tuple(_uuid_strings(rng.bytes(16 * full)))[:n],
    )


@dataclass
class Batch:
    """Encoded records ready for the producer."""

    values: list[bytes]
    keys: list[bytes | None]

    def __len__(self) -> int:
        return len(self.values)


class RecordEncoder:
    """Turns block slices into Kafka values and keys, and tallies the counts of what it encoded."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.counts = np.zeros(spec.vocabulary if spec.kind == "words" else spec.campaigns, dtype=np.int64)
        self.late_records = 0
        if spec.kind == "words":
            self._words = encoded_vocabulary(spec.vocabulary)
        else:
            self._catalogue = ad_catalogue(spec)

    def encode(self, block: Block, start: int, stop: int, now_ms: int) -> Batch:
        if self.spec.kind == "words":
            return self._encode_lines(block, start, stop)
        return self._encode_ads(block, start, stop, now_ms)

    def _encode_lines(self, block: Block, start: int, stop: int) -> Batch:
        rows = block.items[start:stop]
        self.counts += np.bincount(rows.ravel(), minlength=self.counts.size)
        words = self._words
        values = [b" ".join([words[i] for i in row]) for row in rows.tolist()]
        if self.spec.key == "none":
            keys: list[bytes | None] = [None] * len(values)
        elif self.spec.key == "id":
            keys = [str(block.first + i).encode() for i in range(start, stop)]
        else:
            keys = [words[i] for i in rows[:, 0].tolist()]
        return Batch(values, keys)

    def _encode_ads(self, block: Block, start: int, stop: int, now_ms: int) -> Batch:
        cat = self._catalogue
        ads = block.items[start:stop]
        campaigns = cat.campaign_of_ad[ads]
        kinds = block.event_types[start:stop]
        self.counts += np.bincount(campaigns[kinds == VIEW], minlength=self.counts.size)
        late = block.late[start:stop]
        self.late_records += int(late.sum())
        late_ms = now_ms - int(self.spec.late_by_s * 1000)
        values: list[bytes] = []
        rows = zip(
            block.event_ids[start:stop],
            block.users[start:stop].tolist(),
            block.pages[start:stop].tolist(),
            ads.tolist(),
            campaigns.tolist(),
            block.ad_types[start:stop].tolist(),
            kinds.tolist(),
            late.tolist(),
            strict=True,
        )
        for event_id, user, page, ad, campaign, ad_type, kind, is_late in rows:
            # Hand-built JSON: every field is a uuid, a fixed word or an int, so nothing needs escaping.
            values.append(
                (
                    f'{{"event_id":"{event_id}","user_id":"{cat.user_ids[user]}","page_id":"{cat.page_ids[page]}",'
                    f'"ad_id":"{cat.ad_ids[ad]}","campaign_id":"{cat.campaign_ids[campaign]}",'
                    f'"ad_type":"{AD_TYPES[ad_type]}","event_type":"{EVENT_TYPES[kind]}",'
                    f'"event_time":{late_ms if is_late else now_ms}}}'
                ).encode()
            )
        if self.spec.key == "none":
            keys: list[bytes | None] = [None] * len(values)
        elif self.spec.key == "id":
            keys = [e.encode() for e in block.event_ids[start:stop]]
        else:
            keys = [cat.campaign_ids[c].encode() for c in campaigns.tolist()]
        return Batch(values, keys)

    def counts_by_name(self) -> dict[str, int]:
        return counts_by_name(self.spec, self.counts)


class RecordSource:
    """The record stream of one producer process: its blocks in order, handed out n at a time.

    `limit` caps the records of the whole load (all processes): blocks past it are cut or
    skipped, so P sources with the same limit together produce exactly records [0, limit).
    """

    def __init__(
        self, spec: LoadSpec, process_index: int = 0, process_count: int = 1, limit: int | None = None
    ) -> None:
        if not 0 <= process_index < process_count:
            raise ValueError(f"process index {process_index} outside [0, {process_count})")
        self.spec = spec
        self.encoder = RecordEncoder(spec)
        self._sampler = KeySampler(spec.distribution, spec.key_space, spec.zipf_s)
        self._blocks = self._block_indices(process_index, process_count, limit)
        self._limit = limit
        self._block: Block | None = None
        self._pos = 0
        self.exhausted = False

    def _block_indices(self, index: int, count: int, limit: int | None) -> Iterator[int]:
        b = index
        while limit is None or b * self.spec.block_records < limit:
            yield b
            b += count

    def _next_block(self) -> Block | None:
        b = next(self._blocks, None)
        if b is None:
            return None
        size = None
        if self._limit is not None:
            size = min(self.spec.block_records, self._limit - b * self.spec.block_records)
        return make_block(self.spec, self._sampler, b, size)

    def take(self, n: int, now_ms: int = 0) -> Batch:
        """Up to n next records (fewer only when the load's limit is reached)."""
        values: list[bytes] = []
        keys: list[bytes | None] = []
        while len(values) < n:
            if self._block is None or self._pos >= self._block.size:
                self._block, self._pos = self._next_block(), 0
                if self._block is None:
                    self.exhausted = True
                    break
            stop = min(self._block.size, self._pos + n - len(values))
            batch = self.encoder.encode(self._block, self._pos, stop, now_ms)
            values += batch.values
            keys += batch.keys
            self._pos = stop
        return Batch(values, keys)


def counts_by_name(spec: LoadSpec, counts: np.ndarray) -> dict[str, int]:
    """Counts array -> {word: n} (words) or {campaign_id: views} (ads), non-zero entries only."""
    names = vocabulary(spec.vocabulary) if spec.kind == "words" else ad_catalogue(spec).campaign_ids
    return {names[i]: int(counts[i]) for i in np.flatnonzero(counts).tolist()}


def expected_count_array(spec: LoadSpec, records: int) -> np.ndarray:
    """The counts of records [0, records) of the spec, as an array (no encoding, no Kafka)."""
    sampler = KeySampler(spec.distribution, spec.key_space, spec.zipf_s)
    size = spec.vocabulary if spec.kind == "words" else spec.campaigns
    counts = np.zeros(size, dtype=np.int64)
    campaign_of_ad = ad_catalogue(spec).campaign_of_ad if spec.kind == "ads" else None
    for b in range(block_count(spec, records)):
        block = make_block(spec, sampler, b, min(spec.block_records, records - b * spec.block_records))
        if campaign_of_ad is None:
            counts += np.bincount(block.items.ravel(), minlength=size)
        else:
            views = block.items[block.event_types == VIEW]
            counts += np.bincount(campaign_of_ad[views], minlength=size)
    return counts


def expected_counts(spec: LoadSpec, records: int) -> dict[str, int]:
    """Exact word counts (words) or per-campaign view counts (ads) of the first `records` records
    of (spec, spec.seed): what a pre-load of that many records sends, however many processes."""
    return counts_by_name(spec, expected_count_array(spec, records))
