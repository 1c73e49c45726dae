"""The soak's own checks can fail: growth of resources, phases read from a migration journal."""

from __future__ import annotations

from dataclasses import replace

from benchmarks.soak import _journal_phases
from benchmarks.soak_jobs import _utf8
from benchmarks.soak_resources import ResourceSample, growth_violations


def _samples(n: int = 400, grow: str | None = None) -> list[ResourceSample]:
    base = ResourceSample(0.0, 200, 80, 1 << 20, 1 << 20, 10_000, 5_000)
    samples = []
    for i in range(n):
        sample = replace(base, at_s=float(i))
        if grow is not None:
            sample = replace(sample, **{grow: getattr(base, grow) * (1 + i)})
        samples.append(sample)
    return samples


def test_flat_resources_pass():
    assert growth_violations(_samples(400)) == []


def test_growing_open_files_are_reported():
    found = growth_violations(_samples(400, grow="open_files"))
    assert len(found) == 1 and found[0].startswith("open_files kept growing")


def test_growing_state_is_reported():
    assert any(v.startswith("state_bytes") for v in growth_violations(_samples(400, grow="state_bytes")))


def test_too_few_samples_say_nothing():
    assert growth_violations(_samples(200, grow="threads")) == []


def test_journal_phases_in_order_without_temporaries(tmp_path):
    for name in ("0000-planned.json", "0001-donating.json", ".tmp-abc-0002-donated.json"):
        (tmp_path / name).write_text("{}")
    assert _journal_phases(tmp_path) == ["planned", "donating"]
    assert _journal_phases(tmp_path / "missing") == []


def test_what_word_count_rejects():
    assert _utf8(None) is None
    assert _utf8(b"\xff\xfe w1") is None
    assert _utf8("wörter w1".encode()) == "wörter w1"
