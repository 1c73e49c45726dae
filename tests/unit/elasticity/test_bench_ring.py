"""The ring bench's measurements on small sizes (figures checked for sense, never for speed),
and the `ring_command` CLI writing its JSON and PNG."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from benchmarks.ring import measure_lookups, measure_migration, measure_scaling, random_key_hashes, summarize
from elasticity.layout import Layout


def test_scaling_points_track_the_ideal_and_stay_balanced() -> None:
    points = measure_scaling(random_key_hashes(60_000, seed=3), max_channels=8)
    assert [p.n_channels for p in points] == list(range(1, 9))
    assert points[0].moved_over_ideal is None
    for p in points[1:]:
        assert p.ideal_fraction == pytest.approx(1 / p.n_channels)
        assert 0.85 <= p.moved_over_ideal <= 1.15
        assert p.max_over_mean <= 1.10


def test_migration_bench_reports_what_moved(tmp_path) -> None:
    bench = measure_migration(n_keys=5_000, workdir=str(tmp_path))
    report = bench.report
    assert report["keys_total"] == 5_000
    assert 0.15 <= report["keys_moved"] / 5_000 <= 0.25  # ideal 1/5
    assert report["channels_before"] == 4 and report["channels_after"] == 5
    assert bench.donate_collect_s == report["donate_collect_s"] > 0
    summary = summarize(measure_scaling(random_key_hashes(10_000), max_channels=3), 1.0, bench)
    assert set(summary) >= {"moved_fraction_over_ideal", "max_over_mean_load", "lookups_per_s", "migrate_1e6_keys_s"}


def test_lookup_rate_is_positive() -> None:
    assert measure_lookups(random_key_hashes(1_000), Layout.uniform(4), repeats=2) > 0


def test_ring_command_writes_json_and_png(tmp_path) -> None:
    from benchmarks.ring_command import ring_command

    app = typer.Typer()
    app.command("ring")(ring_command)
    app.command("other")(lambda: None)  # a second command keeps "ring" a sub-command
    out = tmp_path / "ring.json"
    result = CliRunner().invoke(
        app,
        [
            "ring",
            "--json",
            str(out),
            "--keys",
            "20000",
            "--max-channels",
            "6",
            "--migrate-keys",
            "3000",
            "--workdir",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    for name in ("moved_fraction_over_ideal", "max_over_mean_load", "lookups_per_s", "migrate_1e6_keys_s"):
        assert figures[name] > 0
    assert len(figures["series"]) == 6
    assert out.with_suffix(".png").stat().st_size > 0
    assert "lookups_per_s" in result.output
