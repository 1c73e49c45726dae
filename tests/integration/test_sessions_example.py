"""The example user job (examples/sessions, written only against the public API), as the project's
streams.yaml declares it, on the real broker and Spark: per-user sessions closed by event-time
timers, rescaled online 2 → 5 → 2, equal to the single-process oracle; a late click is kept in
the rejected table with its reason, a malformed one is dead-lettered; the generated daily backfill
recomputes the clicks' day in batch and the generated reconciliation finds exactly the session the
stream left the late click out of; the GX suite esp generates for the stream passes, and fails once
a stored session breaks the job's own expectations."""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from pathlib import Path

import pytest

from tests.integration.streams import config_for, dead_letters, produce, rescale_while_producing, wait_for_checkpoint

pytestmark = pytest.mark.integration

JOB = "examples.sessions.job:sessions_job"
PROJECT = Path(__file__).parents[2]
T0 = 1_760_000_000_000


def _clicks(rng: random.Random, start_ms: int, n: int) -> list[tuple[str, str, int]]:
    """`n` clicks in event-time order from `start_ms`: 20 users, 6 pages, 0-3 s apart (a user clicks
    about every 30 s, so the 30 s gap both splits and extends sessions)."""
    clicks, t = [], start_ms
    for _ in range(n):
        t += rng.randint(0, 3000)
        clicks.append((f"u{rng.randrange(20)}", f"p{rng.randrange(6)}", t))
    return clicks


def _as_records(clicks: list[tuple[str, str, int]]) -> list[str]:
    return [json.dumps({"user_id": u, "page": p, "event_time": t}) for u, p, t in clicks]


def test_sessions_example_rescaled_online_equals_the_oracle(spark, bootstrap, topic_factory, tmp_path):
    from examples.sessions.job import ALLOWED_LATENESS_MS, GAP_MS, NOT_A_CLICK, page_summary
    from examples.sessions.oracle import page_summary as oracle_page_summary
    from examples.sessions.oracle import sessions_oracle
    from orchestration.streams.catalog import load_catalog, stream_spec
    from pipelines.batch.pipelines import daily_table
    from pipelines.settings import EspSettings
    from pipelines.streams.runner import ElasticStream

    (entry,) = [e for e in load_catalog(PROJECT / "streams.yaml") if e.name == "sessions"]
    assert entry.job == JOB and entry.settings["channels"] == 2
    settings_file = config_for(tmp_path, bootstrap)
    # One Kafka partition: clicks arrive in event-time order, so none is late but the one sent late.
    topic = topic_factory("clicks", partitions=1)
    options = {"input_topic": topic, "input_partitions": 1, "trigger_seconds": 0.5}
    spec = stream_spec(EspSettings.load(settings_file), entry, **options)
    rng = random.Random(7)
    rounds = [_clicks(rng, T0 + r * 1_000_000, 400) for r in range(3)]
    produce(bootstrap, topic, _as_records(rounds[0]) + ["{not a click"])
    stream = ElasticStream(spark, spec)
    stream.start()
    try:
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
        for clicks, channels in zip(rounds[1:], (5, 2)):
            rescale_while_producing(stream, channels, bootstrap, _as_records(clicks))
            wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
        # A click far ahead (now, a day not closed yet) moves the watermark past every session's
        # end; the next batch fires their timers and rejects a click from the first round, now late.
        flush_ms = int(time.time() * 1000)
        produce(bootstrap, topic, _as_records([("flush", "none", flush_ms)]))
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
        produce(bootstrap, topic, _as_records([rounds[0][0]]))
        wait_for_checkpoint(spec.checkpoint, topic, bootstrap, query=stream.query)
    finally:
        stream.stop()

    every_click = [c for clicks in rounds for c in clicks] + [("flush", "none", flush_ms)]
    expected = sessions_oracle([(-1, every_click)], GAP_MS, flush_ms - ALLOWED_LATENESS_MS)
    results = spark.read.parquet(spec.results_table)
    columns = ["user_id", "landing_page", "session_start_ms", "session_end_ms", "clicks"]
    emitted = sorted(tuple(r) for r in results.select(*columns).collect())
    assert emitted == expected  # every session once: none lost, none doubled
    assert len(expected) > 100
    summary = {r.landing_page: (r.sessions, r.mean_duration_ms) for r in page_summary(results).collect()}
    oracle_summary = oracle_page_summary(expected)
    assert {page: n for page, (n, _) in summary.items()} == {page: n for page, (n, _) in oracle_summary.items()}
    for page, (_, mean_ms) in oracle_summary.items():
        assert summary[page][1] == pytest.approx(mean_ms)

    late = spark.read.parquet(spec.rejected_table).collect()
    assert [(r.reason.startswith("late event"), json.loads(r.row)["event_time"]) for r in late] == [
        (True, rounds[0][0][2])
    ]
    assert list(dead_letters(bootstrap, spec.dead_letter_topic).values()) == [NOT_A_CLICK]
    assert stream.last_metrics is not None and stream.last_metrics.channels == 2

    _backfill_the_clicks_day(spec, settings_file)
    daily = spark.read.parquet(f"{daily_table(spec)}/date={_day(T0)}").collect()
    assert len(daily) == len(expected)  # the late click joins a session, it does not make one
    reconciliation = _run_check(entry, settings_file, "reconciliation")
    offending = reconciliation.metadata["offending_keys"].value
    user, _, late_ms = rounds[0][0]
    assert not reconciliation.passed
    assert sorted((o["user_id"], o["session_start_ms"], o["stream_count"], o["batch_count"]) for o in offending) == [
        (user, late_ms, 0, 1),
        (user, late_ms, 1, 0),
    ], offending
    stream_row, batch_row = (json.loads(o["row"]) for o in sorted(offending, key=lambda o: -o["stream_count"]))
    assert batch_row["clicks"] == stream_row["clicks"] + 1  # the batch counts the click the stream rejected

    assert _run_check(entry, settings_file, "results_suite").passed
    _corrupt_one_session(Path(spec.results_table))
    failed = _run_check(entry, settings_file, "results_suite")
    assert not failed.passed and "clicks" in failed.description, failed.description


def _day(epoch_ms: int) -> str:
    return dt.datetime.fromtimestamp(epoch_ms / 1000, dt.UTC).date().isoformat()


def _backfill_the_clicks_day(spec, settings_file) -> None:
    """`esp backfill`'s API over the day of the clicks (they are archived by event time)."""
    from dagster import DagsterInstance

    from orchestration.backfills.runner import plan_backfill, run_backfill
    from pipelines.settings import EspSettings

    plan = plan_backfill(EspSettings.load(settings_file), "sessions", _day(T0), _day(T0), stream_root=spec.root)
    (outcome,) = run_backfill(plan, settings_file=settings_file, instance=DagsterInstance.ephemeral())
    assert outcome.success, outcome.error


def _run_check(entry, settings_file, name: str):
    """One of the stream's generated checks, run in process with the test's settings."""
    from dagster import AssetSelection, DagsterInstance, Definitions, define_asset_job

    from orchestration.quality.gx_validation import GreatExpectationsResource
    from orchestration.quality.user_streams import user_stream_quality
    from orchestration.resources import EspSettingsResource, EspSparkResource

    assets, checks = user_stream_quality([entry])
    (check,) = [c for c in checks if next(iter(c.check_keys)).name == name]
    settings = EspSettingsResource(config_file=str(settings_file))
    job = define_asset_job("check_sessions", selection=AssetSelection.checks(check))
    defs = Definitions(
        assets=assets,
        asset_checks=[check],
        jobs=[job],
        resources={
            "esp_settings": settings,
            "spark": EspSparkResource(settings=settings),
            "gx": GreatExpectationsResource(),
        },
    )
    result = defs.resolve_job_def("check_sessions").execute_in_process(instance=DagsterInstance.ephemeral())
    (evaluation,) = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return evaluation


def _corrupt_one_session(results: Path) -> None:
    """Zero the clicks of one stored session (as a buggy operator would), keeping the file's schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    file = next(f for f in sorted(results.glob("batch_id=*/*.parquet")) if pq.read_table(f).num_rows)
    table = pq.read_table(file)
    index = table.schema.get_field_index("clicks")
    clicks = pa.array([0] + table["clicks"].to_pylist()[1:], table.schema.field("clicks").type)
    pq.write_table(
        table.set_column(index, table.schema.field("clicks"), clicks), file.with_name(f"corrupted-{file.name}")
    )
    file.unlink()
