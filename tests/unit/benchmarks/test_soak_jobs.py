"""The soak's jobs: what they count and what they expect rejected follows each pipeline's own rules."""

from __future__ import annotations

import json
import random

from benchmarks.soak_jobs import WINDOW_S, AdClicksJob, Expected, WordCountJob


def _event(**changes: object) -> bytes:
    event = {
        "event_id": "e1",
        "user_id": "u1",
        "page_id": "p1",
        "ad_id": "a1",
        "campaign_id": "c3",
        "ad_type": "banner",
        "event_type": "view",
        "event_time": 25_300,
    }
    return json.dumps({**event, **changes}).encode()


def test_word_count_counts_words_and_expects_nulls_and_bad_utf8_rejected():
    job, expected = WordCountJob(), Expected()
    job.expect(None, b"a b a", "t:0:0", expected)
    job.expect(b"null", None, "t:0:1", expected)
    job.expect(None, b"\xff\xfe w1", "t:1:0", expected)
    assert expected.counts == {"a": 2, "b": 1}
    assert expected.malformed == {"t:0:1", "t:1:0"}


def test_ad_clicks_counts_views_per_campaign_and_window():
    job, expected = AdClicksJob(), Expected()
    job.expect(None, _event(), "ads:0:0", expected)
    job.expect(None, _event(event_time=29_999), "ads:0:1", expected)
    job.expect(None, _event(event_type="click"), "ads:0:2", expected)  # valid, not a view
    assert WINDOW_S == 10
    assert expected.counts == {"c3|20000": 2}
    assert not expected.malformed


def test_ad_clicks_expects_what_its_parser_rejects():
    job, expected = AdClicksJob(), Expected()
    bad = [
        b"{not json",
        b'{"event_id": "x"}',
        _event(event_time="yesterday"),
        _event(event_type="hover"),
        b"\xff\xfe\x00bad",
        b"[1, 2]",
    ]
    for offset, value in enumerate(bad):
        job.expect(None, value, f"ads:0:{offset}", expected)
    assert len(expected.malformed) == len(bad) and not expected.counts


def test_loads_mix_in_about_one_percent_malformed_records():
    rng = random.Random(5)
    for job in (WordCountJob(), AdClicksJob()):
        expected = Expected()
        for offset in range(5_000):
            key, value = job.record(rng)
            job.expect(key, value, f"t:0:{offset}", expected)
        assert 20 <= len(expected.malformed) <= 90, (job.name, len(expected.malformed))
