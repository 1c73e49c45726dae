"""A validation run on the real stack. A real elastic word count consumes three days of records
(Kafka timestamps set per day), the daily tables are backfilled, and the validation job runs
every asset check through Dagster: all pass. Then one row of the results table is corrupted:
the GX suite and the reconciliation fail and name the word; dead letters above the threshold
give a warning."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from orchestration.names import (
    DEAD_LETTER_VOLUME_CHECK,
    RECONCILIATION_CHECK,
    RESULTS_SUITE_CHECK,
    STATE_AFTER_RESCALE_CHECK,
    VALIDATION_JOB,
    check_op_name,
    dead_letters_asset_key,
    layout_asset_key,
    results_asset_key,
)

pytestmark = pytest.mark.integration

TODAY = dt.datetime.now(dt.UTC).date()
DAYS = [TODAY - dt.timedelta(days=n) for n in (3, 2, 1)]
BAD_RECORDS = [b"", b"   ", b"\xff\xfebad"]


def lines_of(day_index: int) -> list[str]:
    return [" ".join(f"w{(i * 7 + j + day_index) % 41}" for j in range(i % 4 + 1)) for i in range(120)]


def produce_day(bootstrap: str, topic: str, day: dt.date, values: list[bytes]) -> None:
    from kafka import KafkaProducer

    noon_ms = int(dt.datetime.combine(day, dt.time(12), tzinfo=dt.UTC).timestamp() * 1000)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=10)
    for i, value in enumerate(values):
        producer.send(topic, value=value, timestamp_ms=noon_ms + i)
    producer.flush()
    producer.close()


def wait_until_consumed(stream, bootstrap: str, topic: str, timeout_s: float = 180) -> None:
    from kafka import KafkaConsumer, TopicPartition

    from pipelines.streams.metrics import consumed_offsets

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    ends = {
        tp.partition: o
        for tp, o in consumer.end_offsets(
            [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        ).items()
    }
    consumer.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stream.query.processAllAvailable()
        if consumed_offsets(stream.query.lastProgress, topic) == ends:
            return
        time.sleep(0.5)
    raise AssertionError("the stream did not consume the topic in time")


@pytest.fixture(scope="module")
def stack(spark, bootstrap, tmp_path_factory):
    """A stream root with results, bronze and elastic state for three days, and its settings file."""
    from orchestration.backfills.runner import plan_backfill, run_backfill
    from orchestration.stack.project import load_settings
    from pipelines.kafka_topics import TopicSpec, ensure_topics
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec

    tmp = tmp_path_factory.mktemp("validation")
    host, port = bootstrap.split(":")
    settings_file = tmp / "esp.json"
    settings_file.write_text(
        json.dumps(
            {
                "run_dir_name": str(tmp / "run"),
                "kafka": {"host": host, "client_port": int(port)},
                "spark": {"master": "local[2]", "ui_enabled": False, "shuffle_partitions": 4},
            }
        )
    )
    name = f"wcv{uuid.uuid4().hex[:6]}"
    topic = f"{name}-in"
    ensure_topics(bootstrap, [TopicSpec(name=topic, partitions=2)])
    root = tmp / "run" / "streams" / "wordcount"
    spec = StreamSpec(
        name=name,
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(root),
        channels=2,
        trigger_seconds=0.5,
        results_to_kafka=False,
    )
    stream = ElasticStream(spark, spec)
    expected: dict[dt.date, Counter] = {}
    try:
        for index, day in enumerate(DAYS):
            lines = lines_of(index)
            expected[day] = Counter(w for line in lines for w in line.split())
            produce_day(bootstrap, topic, day, [line.encode() for line in lines] + (BAD_RECORDS if index == 0 else []))
            if stream.query is None:
                stream.start()
            wait_until_consumed(stream, bootstrap, topic)
    finally:
        stream.stop()
    settings = load_settings(settings_file)
    plan = plan_backfill(settings, "wordcount", DAYS[0], DAYS[-1])
    assert all(o.success for o in run_backfill(plan, settings_file=settings_file))
    return {"settings_file": settings_file, "root": root, "spec": spec, "expected": expected}


def run_validation(stack, **dlq_config):
    """The validation job of the quality domain, in process, with the test's settings."""
    from dagster import DagsterInstance, Definitions

    from orchestration.quality.checks import DeadLetterCheckConfig
    from orchestration.quality.definitions import defs as quality_defs
    from orchestration.resources import EspSettingsResource, EspSparkResource, KafkaResource

    settings = EspSettingsResource(config_file=str(stack["settings_file"]))
    defs = Definitions.merge(
        quality_defs,
        Definitions(
            resources={
                "esp_settings": settings,
                "spark": EspSparkResource(settings=settings),
                "kafka": KafkaResource(settings=settings),
            }
        ),
    )
    job = defs.resolve_job_def(VALIDATION_JOB)
    dlq_op = check_op_name(dead_letters_asset_key("wordcount"), DEAD_LETTER_VOLUME_CHECK)
    config = DeadLetterCheckConfig(topic=stack["spec"].dead_letter_topic, **dlq_config).model_dump(exclude_none=True)
    result = job.execute_in_process(
        instance=DagsterInstance.ephemeral(), run_config={"ops": {dlq_op: {"config": config}}}
    )
    assert result.success
    return {
        (e.asset_key, e.check_name): e
        for e in (ev.event_specific_data for ev in result.all_events if ev.event_type_value == "ASSET_CHECK_EVALUATION")
    }


def corrupt_newest_row(results: Path, word: str, count: int) -> None:
    """Set `word`'s count in its newest results row, keeping the file's schema (as a buggy
    writer would), under a new file name."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    files = [(int(f.parent.name.split("=")[1]), f) for f in results.glob("batch_id=*/*.parquet")]
    _, file = max((b, f) for b, f in files if word in pq.read_table(f, columns=["word"])["word"].to_pylist())
    table = pq.read_table(file)
    index = table.schema.get_field_index("count")
    counts = pc.if_else(
        pc.equal(table["word"], word), pa.scalar(count, table.schema.field("count").type), table["count"]
    )
    pq.write_table(
        table.set_column(index, table.schema.field("count"), counts), file.with_name(f"corrupted-{file.name}")
    )
    file.unlink()


def test_validation_passes_on_good_data_and_fails_on_a_corrupted_row(stack):
    checks = run_validation(stack, max_dead_letters=10)

    suite = checks[(results_asset_key("wordcount"), RESULTS_SUITE_CHECK)]
    assert suite.passed, suite.description
    assert suite.metadata["gx_success_percent"].value == 100.0
    assert suite.metadata["gx_evaluated_expectations"].value == 5
    reconciliation = checks[(results_asset_key("wordcount"), RECONCILIATION_CHECK)]
    assert reconciliation.passed, reconciliation.metadata["offending_keys"].value
    assert reconciliation.metadata["days_reconciled"].value == 3
    spans = reconciliation.metadata["spans"].value
    assert sum(s["batch_total"] for s in spans) == sum(sum(c.values()) for c in stack["expected"].values())
    state = checks[(layout_asset_key("wordcount"), STATE_AFTER_RESCALE_CHECK)]
    assert state.passed, state.description
    assert state.metadata["sum_of_counts"].value == sum(sum(c.values()) for c in stack["expected"].values())
    dead = checks[(dead_letters_asset_key("wordcount"), DEAD_LETTER_VOLUME_CHECK)]
    assert dead.passed and dead.metadata["volume"].value == len(BAD_RECORDS)
    assert checks[(results_asset_key("adclicks"), RESULTS_SUITE_CHECK)].passed  # nothing written yet: passes, says so

    corrupt_newest_row(Path(stack["spec"].results_table), "w5", -3)

    checks = run_validation(stack, max_dead_letters=1)

    suite = checks[(results_asset_key("wordcount"), RESULTS_SUITE_CHECK)]
    assert not suite.passed
    assert suite.metadata["gx_unsuccessful_expectations"].value == 1
    assert [k["word"] for k in suite.metadata["offending_keys"].value] == ["w5"]
    assert suite.metadata["gx_unexpected_counts"].value["expect_column_values_to_be_between(count)"] == 1
    reconciliation = checks[(results_asset_key("wordcount"), RECONCILIATION_CHECK)]
    assert not reconciliation.passed
    assert {d["word"] for d in reconciliation.metadata["offending_keys"].value} == {"w5"}
    dead = checks[(dead_letters_asset_key("wordcount"), DEAD_LETTER_VOLUME_CHECK)]
    assert not dead.passed and dead.severity.value == "WARN"
    assert sum(dead.metadata["reasons"].value.values()) == len(BAD_RECORDS)
