"""Keys and records of `esp load`: skew, determinism by seed, blocks, ad events, expected counts."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from pipelines.load import LoadSpec, RecordSource, ad_catalogue, expected_counts
from pipelines.load.keys import KeySampler, vocabulary, zipf_probabilities
from pipelines.load.records import AD_TYPES, EVENT_TYPES

AD_FIELDS = {"event_id", "user_id", "page_id", "ad_id", "campaign_id", "ad_type", "event_type", "event_time"}


def words_of(values: list[bytes]) -> Counter:
    return Counter(w for v in values for w in v.decode().split(" "))


def test_vocabulary_words_are_distinct_and_plain():
    words = vocabulary(20_000)
    assert len(set(words)) == 20_000
    assert all(w.isalpha() and w.islower() and len(w) >= 4 for w in words)


def test_zipf_is_skewed_and_uniform_is_flat():
    rng = np.random.default_rng(1)
    n, size = 200_000, 1000
    zipf = np.bincount(KeySampler("zipf", size, 1.1).draw(rng, n), minlength=size) / n
    flat = np.bincount(KeySampler("uniform", size).draw(rng, n), minlength=size) / n
    expected_top = zipf_probabilities(size, 1.1)[0]
    assert zipf[0] == pytest.approx(expected_top, rel=0.05)
    assert zipf[0] > 50 * flat[0]
    assert zipf[:10].sum() > 0.3 and flat[:10].sum() < 0.02
    assert flat.max() < 2 / size  # no item of the uniform draw is far above 1/size
    assert np.all(np.diff(zipf[:5]) < 0)  # the head decreases by rank


def test_larger_zipf_exponent_means_more_skew():
    rng = np.random.default_rng(2)
    top_share = [np.mean(KeySampler("zipf", 1000, s).draw(rng, 50_000) == 0) for s in (0.6, 1.1, 2.0)]
    assert top_share == sorted(top_share) and top_share[-1] > 0.5


@pytest.mark.parametrize("kind", ["words", "ads"])
def test_same_seed_same_records_other_seed_other_records(kind):
    spec = LoadSpec(kind=kind, distribution="zipf", block_records=100)
    first = RecordSource(spec).take(750, now_ms=1).values
    again = RecordSource(spec).take(750, now_ms=1).values
    other = RecordSource(spec.model_copy(update={"seed": 7})).take(750, now_ms=1).values
    assert first == again
    assert first != other


def test_records_do_not_depend_on_the_number_of_processes():
    spec = LoadSpec(block_records=64, key="id")
    single = RecordSource(spec, limit=1000).take(2000)
    shares = [RecordSource(spec, i, 3, limit=1000).take(2000) for i in range(3)]
    assert len(single) == 1000 and sum(len(s) for s in shares) == 1000
    by_id = {k: v for share in shares for k, v in zip(share.keys, share.values)}
    assert by_id == dict(zip(single.keys, single.values))
    assert sorted(int(k) for k in by_id) == list(range(1000))


def test_word_lines_have_w_words_from_the_vocabulary():
    spec = LoadSpec(vocabulary=50, words_per_line=5)
    batch = RecordSource(spec).take(300)
    vocab = set(vocabulary(50))
    for value, key in zip(batch.values, batch.keys):
        words = value.decode().split(" ")
        assert len(words) == 5 and set(words) <= vocab
        assert key is None


def test_natural_key_of_a_line_is_its_first_word():
    batch = RecordSource(LoadSpec(key="natural")).take(50)
    assert all(v.split(b" ")[0] == k for v, k in zip(batch.values, batch.keys))


def test_expected_counts_match_the_records_a_preload_sends():
    spec = LoadSpec(distribution="zipf", vocabulary=300, words_per_line=6, block_records=128, seed=3)
    records = 1000  # not a multiple of the block size: the last block is cut
    shares = [RecordSource(spec, i, 2, limit=records) for i in range(2)]
    values = [v for s in shares for v in s.take(10_000).values]
    assert len(values) == records
    counted = words_of(values)
    assert expected_counts(spec, records) == dict(counted)
    assert sum(s.encoder.counts.sum() for s in shares) == records * 6
    assert sum(counted.values()) == records * 6


def test_ad_events_are_json_with_the_yahoo_fields():
    spec = LoadSpec(kind="ads", campaigns=7, ads_per_campaign=3, block_records=50)
    batch = RecordSource(spec).take(400, now_ms=1_700_000_000_000)
    mapping = ad_catalogue(spec).ad_to_campaign()
    events = [json.loads(v) for v in batch.values]
    assert len(mapping) == 21 and len(set(mapping.values())) == 7
    assert all(Counter(mapping.values())[c] == 3 for c in set(mapping.values()))
    for event in events:
        assert set(event) == AD_FIELDS
        assert event["event_type"] in EVENT_TYPES and event["ad_type"] in AD_TYPES
        assert mapping[event["ad_id"]] == event["campaign_id"]  # the fixed ad -> campaign map
        assert event["event_time"] == 1_700_000_000_000
    assert len({e["event_id"] for e in events}) == 400
    assert {e["event_type"] for e in events} == set(EVENT_TYPES)


def test_late_events_lie_in_the_past_by_the_given_seconds():
    spec = LoadSpec(kind="ads", late_fraction=0.25, late_by_s=30)
    source = RecordSource(spec)
    now = 1_700_000_000_000
    times = [json.loads(v)["event_time"] for v in source.take(4000, now_ms=now).values]
    late = sum(t == now - 30_000 for t in times)
    assert late == source.encoder.late_records
    assert 0.2 < late / 4000 < 0.3
    assert all(t in (now, now - 30_000) for t in times)


def test_ad_counts_are_views_per_campaign_and_keys_are_campaigns():
    spec = LoadSpec(kind="ads", key="natural", campaigns=5, block_records=100)
    source = RecordSource(spec, limit=900)
    batch = source.take(900)
    events = [json.loads(v) for v in batch.values]
    views = Counter(e["campaign_id"] for e in events if e["event_type"] == "view")
    assert source.encoder.counts_by_name() == dict(views) == expected_counts(spec, 900)
    assert [k.decode() for k in batch.keys] == [e["campaign_id"] for e in events]
