"""The pipelines `esp soak` runs, each with its seeded input, its oracle and its outputs.

A job makes the records of its load (a small seeded share malformed, which must reach the
dead-letter topic with a reason), computes what the stream must end with from the input topic
read back (the topic is the ledger), and reads what the stream produced. Both sides are keyed by
the stream's state key, so the soak compares them, and the stored state, the same way for every
job:

- word count: a word's count;
- ad clicks: `campaign|window start ms` (`pipelines.jobs.keys`), views per campaign and
  event-time window; an event whose window had closed is counted in the late table instead, so
  counted + late = every valid view.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Protocol

from pipelines.jobs.keys import window_key
from pipelines.streams.names import late_table_path, results_table_path

MALFORMED_SHARE = 0.01
WORD_KEYS = 2_000
CAMPAIGNS = 20
WINDOW_S = 10  # the stream spec's default window
LATE_SHARE = 0.02
EVENT_TYPES = ("view", "click", "purchase")
STRING_FIELDS = ("event_id", "user_id", "page_id", "ad_id", "campaign_id", "ad_type", "event_type")


@dataclass
class Expected:
    """What the stream must end with: a count per state key, and the positions it must reject."""

    counts: Counter[str] = field(default_factory=Counter)
    malformed: set[str] = field(default_factory=set)  # topic:partition:offset


@dataclass(frozen=True)
class Outputs:
    """What the stream produced: the newest count per key, and late counts per key (ad clicks)."""

    counted: dict[str, int]
    late: dict[str, int]


class SoakJob(Protocol):
    name: str
    job: str
    topic: str

    def record(self, rng: random.Random) -> tuple[bytes | None, bytes | None]: ...

    def expect(self, key: bytes | None, value: bytes | None, position: str, into: Expected) -> None: ...

    def outputs(self, root: Path) -> Outputs: ...


def _utf8(value: bytes | None) -> str | None:
    """The record's text, or None for what every job rejects (a null value, invalid UTF-8)."""
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _newest_counts(root: Path, key_columns: list[str]) -> list[tuple[tuple[object, ...], int]]:
    """(key columns, count) of the newest row per key in the stream's results table."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    table = ds.dataset(results_table_path(root), partitioning="hive").to_table(
        columns=[*key_columns, "count", "batch_id"]
    )
    newest = table.group_by(key_columns).aggregate([("batch_id", "max")])
    joined = table.join(newest, keys=key_columns).filter(pc.equal(pc.field("batch_id"), pc.field("batch_id_max")))
    columns = [joined[c].to_pylist() for c in key_columns]
    return [(tuple(values), int(count)) for *values, count in zip(*columns, joined["count"].to_pylist())]


class WordCountJob:
    name, job, topic = "wordcount", "wordcount", "words"

    def record(self, rng: random.Random) -> tuple[bytes | None, bytes | None]:
        draw = rng.random()
        if draw < MALFORMED_SHARE / 2:
            return b"null", None  # a null value needs a key
        if draw < MALFORMED_SHARE:
            return None, b"\xff\xfe w1 " + str(rng.randint(0, 9)).encode()
        words = (f"w{min(int(rng.paretovariate(1.2)), WORD_KEYS)}" for _ in range(rng.randint(1, 6)))
        return None, " ".join(words).encode()

    def expect(self, key: bytes | None, value: bytes | None, position: str, into: Expected) -> None:
        line = _utf8(value)
        if line is None:
            into.malformed.add(position)
            return
        into.counts.update(w[:200] for w in line.split())

    def outputs(self, root: Path) -> Outputs:
        return Outputs({str(word): count for (word,), count in _newest_counts(root, ["word"])}, {})


class AdClicksJob:
    name, job, topic = "adclicks", "adclicks", "ads"

    def __init__(self) -> None:
        self._serial = 0

    def record(self, rng: random.Random) -> tuple[bytes | None, bytes | None]:
        draw = rng.random()
        if draw < MALFORMED_SHARE:
            return None, rng.choice(
                [b"{not json", b'{"event_id": "x"}', b"\xff\xfe\x00bad", self._event(rng, event_time="yesterday")]
            )
        now_ms = int(time.time() * 1000)
        # A few events far behind every watermark: counted late, never in the windows' counts.
        event_time = now_ms - 600_000 if draw < MALFORMED_SHARE + LATE_SHARE else now_ms - rng.randint(0, 3_000)
        return None, self._event(rng, event_time=event_time)

    def _event(self, rng: random.Random, event_time: object) -> bytes:
        self._serial += 1
        return json.dumps(
            {
                "event_id": f"e{self._serial}",
                "user_id": f"u{rng.randint(0, 99)}",
                "page_id": f"p{rng.randint(0, 9)}",
                "ad_id": f"a{rng.randint(0, 199)}",
                "campaign_id": f"c{rng.randint(0, CAMPAIGNS - 1)}",
                "ad_type": "banner",
                "event_type": rng.choice(EVENT_TYPES),
                "event_time": event_time,
            }
        ).encode()

    def expect(self, key: bytes | None, value: bytes | None, position: str, into: Expected) -> None:
        event = _valid_event(value)
        if event is None:
            into.malformed.add(position)
            return
        if event["event_type"] == "view":
            window_ms = WINDOW_S * 1000
            into.counts[window_key(str(event["campaign_id"]), int(event["event_time"]) // window_ms * window_ms)] += 1

    def outputs(self, root: Path) -> Outputs:
        counted = {
            window_key(str(campaign), _epoch_ms(start)): count
            for (campaign, start), count in _newest_counts(root, ["campaign_id", "window_start"])
        }
        return Outputs(counted, _late_counts(Path(late_table_path(root))))


def _valid_event(value: bytes | None) -> dict[str, object] | None:
    """The event as the ad-clicks parser accepts it (all fields, integer event_time, known type), or None."""
    text = _utf8(value)
    try:
        event = json.loads(text) if text is not None else None
    except ValueError:
        return None
    if not isinstance(event, dict) or any(event.get(f) is None for f in (*STRING_FIELDS, "event_time")):
        return None
    if not isinstance(event["event_time"], int) or event["event_type"] not in EVENT_TYPES:
        return None
    return event


def _epoch_ms(start: object) -> int:
    from datetime import datetime

    assert isinstance(start, datetime)
    moment = start if start.tzinfo is not None else start.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _late_counts(late: Path) -> dict[str, int]:
    import pyarrow.dataset as ds

    if not late.is_dir() or not any(late.rglob("*.parquet")):
        return {}
    table = ds.dataset(str(late), partitioning="hive").to_table(columns=["campaign_id", "window_start_ms", "n"])
    counts: Counter[str] = Counter()
    for campaign, start, n in zip(*(table[c].to_pylist() for c in ("campaign_id", "window_start_ms", "n"))):
        counts[window_key(str(campaign), int(start))] += int(n)
    return dict(counts)


JOBS: dict[str, SoakJob] = {"wordcount": WordCountJob(), "adclicks": AdClicksJob()}
