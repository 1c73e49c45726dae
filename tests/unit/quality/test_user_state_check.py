"""The post-rescale state check of a user job, on the example sessionization operator's state
(values of its own, timers stored beside them) rescaled by the real Migrator: it passes after
clean rescales, a key's timers counted as placed by the key they belong to, and fails naming the
entry when a key's timers sit in the wrong channel."""

from __future__ import annotations

import pyarrow as pa

from elasticity.hashing import hash_str
from elasticity.operators.harness import Batch, Harness
from elasticity.operators.timers import TIMER_PREFIX
from elasticity.state import BytesCodec, MemoryBackend
from examples.sessions.operator import Sessionize
from orchestration.quality.gx_validation import GreatExpectationsResource
from orchestration.quality.state_check import check_user_state
from pipelines.streams.spec import StreamSpec

USERS = [f"u{i}" for i in range(40)]


def _open_sessions(spec: StreamSpec) -> Harness:
    """40 users with a session still open (a timer each), rescaled 2 → 5 → 2 between batches."""
    harness = Harness(Sessionize(gap_ms=30_000), spec.elastic_root, channels=2)
    for batch, channels in enumerate((5, 2)):
        clicks = pa.table(
            {
                "user_id": USERS,
                "page": [f"p{i % 3}" for i in range(len(USERS))],
                "event_time": [1_000 * batch + i for i in range(len(USERS))],
            }
        )
        harness.run(Batch(clicks))
        harness.rescale("scale_to", channels)
    return harness


def test_a_user_jobs_state_with_timers_passes_after_rescales(tmp_path):
    spec = StreamSpec(name="sessions", job="examples.sessions.job:sessions_job", root=str(tmp_path / "sessions"))
    _open_sessions(spec).close()

    result = check_user_state("sessions", spec, GreatExpectationsResource())

    assert result.passed, result.suite.failed
    keys = set(result.census.rows["key"])
    assert {TIMER_PREFIX + u for u in USERS} <= keys and set(USERS) <= keys
    assert result.census.layout.n_channels == 2 and result.value_name == "stored bytes"
    assert (result.census.rows["value"] > 0).all()


def test_a_timer_in_the_wrong_channel_fails_and_is_named(tmp_path):
    spec = StreamSpec(name="sessions", job="examples.sessions.job:sessions_job", root=str(tmp_path / "sessions"))
    harness = _open_sessions(spec)
    layout, version = harness.layout, harness.last_batch_id + 1
    harness.close()
    timer = TIMER_PREFIX + "u7"
    owner = int(layout.owner(hash_str("u7")))
    wrong = next(c for c in layout.channels if c != owner)
    backend = MemoryBackend(BytesCodec(), durable=spec.elastic_root)
    with backend.open(owner).begin(version) as tx:
        value = tx.get(timer, key_hash=hash_str("u7"))
        tx.delete(timer, key_hash=hash_str("u7"))
    with backend.open(wrong).begin(version) as tx:
        tx.put(timer, value, key_hash=hash_str("u7"))
    backend.close()

    result = check_user_state("sessions", spec, GreatExpectationsResource())

    assert not result.passed
    routing = next(e for e in result.suite.failed if e.column == "channel = routed_channel")
    assert routing.offending == [{"key": timer, "channel": wrong, "routed_channel": owner}]
