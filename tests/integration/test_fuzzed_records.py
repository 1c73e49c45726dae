"""Property-based fuzzing of both pipelines on the real broker and Spark: hypothesis draws many
hostile records (bytes, text, JSON shapes, probe look-alikes), they go into one topic, one stream
runs over them, and then:

- every batch commits (the stream reaches the topic's end with its query alive);
- every record is accounted for exactly once: archived as accepted (bronze table), dead-lettered,
  or taken as a valid probe; accepted + dead-lettered + probes = produced;
- every dead letter's reason is one of `pipelines.dead_letters.Reason`, and records built with a
  known defect carry exactly that reason;
- what was accepted is what was counted (word count: the words of the accepted lines; ad
  clicks: the accepted views per campaign and window, counted or counted late).

One stream run per pipeline over a thousand-odd records keeps this to a minute or two each;
records are drawn with hypothesis's generation phase only (a failure lists the records).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.integration.streams import dead_letters, produce_records, wait_for_checkpoint

pytestmark = pytest.mark.integration

RECORDS = 1_200
GOOD = "accepted"
PROBE = "probe"
UNKNOWN = None
"""An expected outcome: GOOD, PROBE, a `Reason` value, or UNKNOWN (either way, but once)."""

JAVA_SPACE = " \t\n\x0b\f\r"  # what `\s` matches in Spark's (Java) regular expressions


@dataclass(frozen=True)
class Drawn:
    key: bytes | None
    value: bytes | None
    expected: str | None


def _draw_many(strategy: st.SearchStrategy[Drawn], count: int) -> list[Drawn]:
    """`count` examples of `strategy`, drawn by hypothesis's generation phase (edge cases first)."""
    drawn: list[Drawn] = []

    @settings(
        max_examples=count,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(record: Drawn) -> None:
        drawn.append(record)

    collect()
    return drawn


def _weighted(*branches: tuple[int, st.SearchStrategy[Drawn]]) -> st.SearchStrategy[Drawn]:
    """One of the strategies, each in proportion to its weight (`one_of` leans to its first ones)."""
    pool = [strategy for weight, strategy in branches for _ in range(weight)]
    return st.integers(0, len(pool) - 1).flatmap(lambda i: pool[i])


def _probes() -> st.SearchStrategy[Drawn]:
    from pipelines.dead_letters import Reason
    from pipelines.probes import PROBE_KAFKA_KEY, Probe

    now = int(time.time() * 1000)
    valid = st.builds(
        lambda key, lag: Drawn(PROBE_KAFKA_KEY, Probe(0, key, now - lag, 0).to_json(), PROBE),
        st.text(min_size=1, max_size=20),
        st.integers(0, 10_000),
    )
    junk = st.one_of(st.none(), st.binary(max_size=40), _json_values().map(lambda v: json.dumps(v).encode()))
    invalid = junk.filter(lambda v: not _looks_like_a_probe(v)).map(
        lambda v: Drawn(PROBE_KAFKA_KEY, v, Reason.INVALID_PROBE.value)
    )
    return st.one_of(valid, invalid)


def _looks_like_a_probe(value: bytes | None) -> bool:
    try:
        parsed = json.loads(value) if value is not None else None
    except ValueError:
        return False
    return isinstance(parsed, dict) and "routing_key" in parsed and "sent_ms" in parsed


def _json_values() -> st.SearchStrategy[object]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
    )
    return st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    )


# -- word count ------------------------------------------------------------------------------


def _line_outcome(value: bytes | None) -> str:
    from pipelines.dead_letters import MAX_VALUE_BYTES, Reason

    if value is None:
        return Reason.NULL_VALUE.value
    if len(value) > MAX_VALUE_BYTES:
        return Reason.VALUE_TOO_LARGE.value
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return Reason.NOT_UTF8.value
    return GOOD if text.strip(JAVA_SPACE) else Reason.EMPTY_LINE.value


def _lines() -> st.SearchStrategy[Drawn]:
    words = st.one_of(
        st.sampled_from(["w1", "w2", "ü", "a|b", "x" * 250, "\u00a0", "\u2028", "\\", '"', "\x00"]),
        st.text(min_size=1, max_size=12),
    )
    spaces = st.text(alphabet=JAVA_SPACE, min_size=1, max_size=3)
    lines = st.builds(
        lambda ws, gaps, lead: lead + "".join(w + g for w, g in zip(ws, gaps)),
        st.lists(words, max_size=6),
        st.lists(spaces, min_size=6, max_size=6),
        st.text(alphabet=JAVA_SPACE, max_size=2),
    ).map(str.encode)
    values = st.one_of(lines, st.text(max_size=30).map(str.encode), st.binary(max_size=30), st.none())
    keys = st.one_of(st.none(), st.binary(max_size=8))
    plain = st.builds(lambda k, v: Drawn(k if v is not None else (k or b"k"), v, _line_outcome(v)), keys, values)
    return _weighted((8, plain), (1, _probes()))


def _tokens(line: str) -> list[str]:
    return [t[:200] for t in re.split(f"[{re.escape(JAVA_SPACE)}]+", line) if t]


# -- ad clicks -------------------------------------------------------------------------------

WINDOW_S = 10
FIELDS = ("event_id", "user_id", "page_id", "ad_id", "campaign_id", "ad_type")


def _events() -> st.SearchStrategy[Drawn]:
    from pipelines.dead_letters import MAX_EPOCH_MS, Reason

    now = int(time.time() * 1000)
    names = st.text(max_size=10)  # `|`, quotes, control characters, any plane
    base = st.fixed_dictionaries(
        {f: names for f in FIELDS}
        | {
            "event_type": st.sampled_from(["view", "view", "click", "purchase"]),
            "event_time": st.integers(-60_000, 60_000).map(lambda d: now + d),
        }
    )
    good = base.map(lambda e: (e, GOOD))
    defects = [
        (st.sampled_from(FIELDS), lambda e, f: {k: v for k, v in e.items() if k != f}, Reason.MISSING_FIELD),
        (st.sampled_from(FIELDS), lambda e, f: e | {f: None}, Reason.MISSING_FIELD),
        (st.sampled_from(["yesterday", "", "soon"]), lambda e, t: e | {"event_time": t}, Reason.WRONG_TYPE),
        (st.booleans(), lambda e, b: e | {"event_time": b}, Reason.WRONG_TYPE),
        (st.sampled_from(FIELDS), lambda e, f: e | {f: "c" * 1_001}, Reason.FIELD_TOO_LONG),
        (
            st.text(max_size=8).filter(lambda t: t not in ("view", "click", "purchase")),
            lambda e, t: e | {"event_type": t},
            Reason.UNKNOWN_EVENT_TYPE,
        ),
        (
            st.one_of(st.integers(-(2**63), -1), st.integers(MAX_EPOCH_MS, 2**63 - 1)),
            lambda e, t: e | {"event_time": t},
            Reason.EVENT_TIME_OUT_OF_RANGE,
        ),
        (st.integers(now + 3_600_000, MAX_EPOCH_MS - 1), lambda e, t: e | {"event_time": t}, Reason.EVENT_TIME_AHEAD),
        (st.integers(0, now - 8 * 86_400_000), lambda e, t: e | {"event_time": t}, Reason.EVENT_TIME_BEHIND),
    ]
    broken = st.one_of(
        *(
            st.tuples(base, draw).map(lambda pair, change=change, reason=reason: (change(*pair), reason.value))
            for draw, change, reason in defects
        )
    )
    # Any JSON shape in any field, or as the whole record: accepted or not, but accounted for.
    wild_field = st.tuples(base, st.sampled_from([*FIELDS, "event_type", "event_time"]), _json_values()).map(
        lambda t: (t[0] | {t[1]: t[2]}, UNKNOWN)
    )
    wild = _json_values().map(lambda v: (v, UNKNOWN))
    as_json = [
        strategy.map(lambda pair: Drawn(None, json.dumps(pair[0]).encode(), pair[1]))
        for strategy in (good, broken, wild_field, wild)
    ]
    text = st.one_of(
        st.sampled_from([b"{not json", b"", b"   ", b"[1,", b"nul"]).map(
            lambda v: Drawn(None, v, Reason.INVALID_JSON.value)
        ),
        st.binary(max_size=30).map(lambda v: Drawn(None, v, _bytes_outcome(v))),
    )
    return _weighted((8, as_json[0]), (8, as_json[1]), (2, as_json[2]), (1, as_json[3]), (1, text), (1, _probes()))


def _bytes_outcome(value: bytes) -> str | None:
    from pipelines.dead_letters import Reason

    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return Reason.NOT_UTF8.value
    return UNKNOWN


# -- the run ---------------------------------------------------------------------------------


def _run(spark, bootstrap, topic_factory, tmp_path, job: str, drawn: list[Drawn]):
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec

    topic = topic_factory(f"fuzz-{job}", partitions=2)
    positions = produce_records(bootstrap, topic, [(d.key, d.value) for d in drawn])
    spec = StreamSpec(
        name=f"fuzz-{job}",
        job=job,
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(tmp_path / job),
        channels=3,
        trigger_seconds=0.5,
        max_offsets_per_trigger=400,
        window_seconds=WINDOW_S,
    )
    stream = ElasticStream(spark, spec)
    query = stream.start()
    try:
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap, timeout_s=600, query=query)
        assert query.isActive, query.exception()
    finally:
        stream.stop()
    return spec, dict(zip(positions, drawn))


def _check_accounting(spark, bootstrap, spec, by_position: dict[str, Drawn]) -> list:
    """Each record once: accepted (bronze), dead-lettered or a probe, as expected; the accepted rows."""
    from pipelines.dead_letters import REASONS

    letters = dead_letters(bootstrap, spec.dead_letter_topic)
    bronze = spark.read.parquet(spec.bronze_table).collect()
    accepted = Counter(f"{r.topic}:{r.partition}:{r.offset}" for r in bronze)
    assert not [p for p, n in accepted.items() if n > 1], "a record archived twice"
    assert set(letters.values()) <= REASONS, set(letters.values()) - REASONS
    assert not accepted.keys() & letters.keys(), "a record both accepted and dead-lettered"
    wrong = []
    for position, record in by_position.items():
        outcome = GOOD if position in accepted else letters.get(position, PROBE)
        allowed = {GOOD, *REASONS} if record.expected is UNKNOWN else {record.expected}
        if outcome not in allowed:
            wrong.append((position, record, outcome))
    assert not wrong, f"{len(wrong)} record(s) with another outcome than expected, e.g. {wrong[:5]}"
    assert len(accepted) + len(letters) + sum(d.expected == PROBE for d in by_position.values()) == len(by_position)
    return bronze


def test_fuzzed_lines_are_all_counted_or_dead_lettered(spark, bootstrap, topic_factory, tmp_path):
    from tests.results import latest_word_counts

    drawn = _draw_many(_lines(), RECORDS)
    # Beside hypothesis's short ones: a 0.5 MB word and a value over the 1 MB limit.
    drawn += [Drawn(None, b"w" * 500_000, GOOD), Drawn(None, b"w1 " * 400_000, _line_outcome(b"w1 " * 400_000))]
    spec, by_position = _run(spark, bootstrap, topic_factory, tmp_path, "wordcount", drawn)

    bronze = _check_accounting(spark, bootstrap, spec, by_position)
    expected = Counter(token for row in bronze for token in _tokens(row.line))
    assert latest_word_counts(spark, spec.results_table) == dict(expected)


def test_fuzzed_ad_events_are_all_counted_counted_late_or_dead_lettered(spark, bootstrap, topic_factory, tmp_path):
    from pipelines.dead_letters import Reason
    from pipelines.jobs.keys import window_key
    from pipelines.streams.results import latest_rows

    drawn = _draw_many(_events(), RECORDS)
    now = int(time.time() * 1000)
    event = dict.fromkeys(FIELDS, "x") | {"event_type": "view", "event_time": now}
    drawn += [Drawn(None, json.dumps(event | {"campaign_id": "c" * 600_000}).encode(), Reason.FIELD_TOO_LONG.value)]
    spec, by_position = _run(spark, bootstrap, topic_factory, tmp_path, "adclicks", drawn)

    bronze = _check_accounting(spark, bootstrap, spec, by_position)
    size = WINDOW_S * 1000
    views = Counter(window_key(r.campaign_id, r.event_time // size * size) for r in bronze if r.event_type == "view")
    counted = Counter(
        {
            window_key(r.campaign_id, int(r.window_start.timestamp() * 1000)): r["count"]
            for r in latest_rows(spark, spec.results_table, ["campaign_id", "window_start"]).collect()
        }
    )
    late: Counter[str] = Counter()
    for r in spark.read.parquet(spec.late_table).collect():  # written by every batch, if empty
        late[window_key(r.campaign_id, r.window_start_ms)] += r.n
    assert counted + late == views
