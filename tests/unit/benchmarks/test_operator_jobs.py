"""The operator benchmark's user job (`benchmarks.operator_jobs.TopPages`) through the in-process
elastic stage (`elasticity.operators.Harness`): every batch emits each touched user's top pages
as the plain-Python oracle of `benchmarks.operator_bench` computes them over everything so far,
through online rescales (2 → 5 → 3 channels), replays and partial crashes; and the benchmark's
bookkeeping around the runs (rotation, medians, ratios, the optional system's failure), with the
runs themselves faked."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks import operator_bench
from benchmarks.operator_bench import (
    APPLY,
    ESP,
    TRANSFORM,
    OperatorOptions,
    ViewTopic,
    encode_views,
    oracle_top_pages,
    page_views,
    run_operator_benchmark,
)
from benchmarks.operator_jobs import OUTPUT_SCHEMA, TopPages, top_pages_text, topk_pages_job
from elasticity.operators import Batch, BatchResult, Harness
from tests.unit.operators.drive import drive, scratch_dir, steps

View = tuple[str, str]


def views(rows: Sequence[View]) -> Batch:
    users = pa.array([u for u, _ in rows], pa.string())
    return Batch(pa.table({"user_id": users, "page": pa.array([p for _, p in rows], pa.string())}))


def emitted(result: BatchResult) -> dict[str, str]:
    rows = result.output.to_pylist()
    assert len(rows) == len({r["user_id"] for r in rows}), "one row per touched user and batch"
    return {r["user_id"]: r["top_pages"] for r in rows}


def oracle_of(batches: Sequence[Batch]) -> dict[str, str]:
    users = [u for b in batches for u in b.rows["user_id"].to_pylist()]
    pages = [p for b in batches for p in b.rows["page"].to_pylist()]
    return oracle_top_pages(users, pages)


def test_top_pages_text_orders_by_count_then_page_name():
    assert top_pages_text({"p2": 4, "p7": 4, "p1": 5, "p10": 1, "p3": 4}) == "p1:5,p2:4,p3:4"
    assert top_pages_text({"p2": 1, "p10": 1}) == "p10:1,p2:1"  # names compare as strings, as the oracle's
    assert top_pages_text({}) == ""


def test_job_declares_the_operator_keyed_by_user():
    job = topk_pages_job()
    assert isinstance(job.operator, TopPages) and job.operator.key_column == "user_id"
    assert job.operator.output_schema.equals(OUTPUT_SCHEMA) and job.result_key_columns == ("user_id",)


def test_every_batch_emits_the_oracle_of_all_views_so_far_across_rescales():
    users, pages = page_views(3000, users=60, pages=12, zipf_s=1.0, seed=3)
    everything = list(zip(users, pages))
    batches = [views(everything[i : i + 400]) for i in range(0, len(everything), 400)]
    with scratch_dir() as root:
        harness = Harness(TopPages(), root, channels=2)
        newest: dict[str, str] = {}
        for i, batch in enumerate(batches):
            if i == 3:
                harness.rescale("scale_to", 5)
            if i == 6:
                harness.rescale("scale_to", 3)
            out = emitted(harness.run(batch))
            so_far = oracle_of(batches[: i + 1])
            touched = set(batch.rows["user_id"].to_pylist())
            assert out == {u: so_far[u] for u in touched}
            newest.update(out)
        assert harness.layout.n_channels == 3 and harness.misplaced_keys() == []
        assert newest == oracle_of(batches)
        harness.close()


def test_an_empty_batch_emits_nothing():
    with scratch_dir() as root:
        harness = Harness(TopPages(), root, channels=2)
        assert harness.run(views([])).output.num_rows == 0
        harness.close()


def test_the_load_is_seeded_skewed_and_plain_json():
    first = page_views(5000, users=100, pages=20, zipf_s=1.0, seed=1)
    assert first == page_views(5000, users=100, pages=20, zipf_s=1.0, seed=1)
    users, _ = first
    assert users.count("u0") > users.count("u50") * 10  # Zipf: the first user is the hottest
    assert encode_views(["u1"], ["p2"]) == [b'{"user_id":"u1","page":"p2"}']


ROWS = st.lists(st.tuples(st.sampled_from([f"u{i}" for i in range(9)]), st.sampled_from(["a", "b", "c", "d"])))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=steps(ROWS.map(views), max_steps=12))
def test_random_rescales_replays_and_crashes_keep_the_oracle(plan):
    with scratch_dir() as root:
        harness = Harness(TopPages(k=3), root, channels=2)
        results = drive(harness, plan)
        newest: dict[str, str] = {}
        for batch_id in sorted(results):
            newest.update(emitted(results[batch_id]))
        assert newest == oracle_of(harness.batches)
        harness.close()


class FakeRuns:
    """Stands in for `operator_bench._run`: a fixed rate per system, an error for `failing`."""

    RATES = {ESP: 300.0, APPLY: 200.0, TRANSFORM: 100.0}

    def __init__(self, failing: str | None = None) -> None:
        self.failing = failing
        self.calls: list[tuple[str, int]] = []

    def __call__(self, system, spark, bootstrap, load, options, rep, check):
        self.calls.append((system, rep))
        if system == self.failing:
            raise RuntimeError(f"{system} failed: UNSUPPORTED_FEATURE")
        run = {"system": system, "repetition": rep, "records_per_s": self.RATES[system] + rep}
        run |= {"busy_records_per_s": 2 * self.RATES[system], "batches": 2}
        return run | ({"correctness": {"ok": True}} if check else {})


FAKE_SPARK = SimpleNamespace(conf=SimpleNamespace(set=lambda key, value: None))
"""All the benchmark's own code asks of the session once the runs are faked."""


LOAD = ViewTopic("t", 10, {})


def test_runs_rotate_and_give_medians_and_ratios(monkeypatch):
    fake = FakeRuns()
    monkeypatch.setattr(operator_bench, "_run", fake)
    options = OperatorOptions(repetitions=3)
    results = run_operator_benchmark(FAKE_SPARK, "b", options, LOAD, warmup=LOAD)
    assert fake.calls[:3] == [(ESP, -1), (APPLY, -1), (TRANSFORM, -1)]
    assert [s for s, _ in fake.calls[3:]] == [ESP, APPLY, TRANSFORM, APPLY, TRANSFORM, ESP, TRANSFORM, ESP, APPLY]
    assert results["systems"] == [ESP, APPLY, TRANSFORM] and results["unavailable"] == {}
    wall = results["medians"][ESP]["wall"]
    assert (wall["median"], wall["min"], wall["max"], wall["n"]) == (301.0, 300.0, 302.0, 3)
    assert results["ratios"][f"{ESP}/{APPLY}"] == {"wall": pytest.approx(301 / 201), "busy": pytest.approx(1.5)}
    assert results["correct"] is True and sum("correctness" in r for r in results["runs"]) == 3


def test_a_failing_transform_with_state_is_recorded_and_left_out(monkeypatch):
    fake = FakeRuns(failing=TRANSFORM)
    monkeypatch.setattr(operator_bench, "_run", fake)
    results = run_operator_benchmark(FAKE_SPARK, "b", OperatorOptions(repetitions=2), LOAD, warmup=LOAD)
    assert fake.calls.count((TRANSFORM, -1)) == 1 and all(s != TRANSFORM for s, rep in fake.calls if rep >= 0)
    assert results["systems"] == [ESP, APPLY]
    assert "UNSUPPORTED_FEATURE" in results["unavailable"][TRANSFORM]
    assert list(results["ratios"]) == [f"{ESP}/{APPLY}"]


def test_a_failing_esp_or_apply_in_pandas_fails_the_benchmark(monkeypatch):
    monkeypatch.setattr(operator_bench, "_run", FakeRuns(failing=APPLY))
    with pytest.raises(RuntimeError, match="UNSUPPORTED_FEATURE"):
        run_operator_benchmark(FAKE_SPARK, "b", OperatorOptions(repetitions=1), LOAD)
