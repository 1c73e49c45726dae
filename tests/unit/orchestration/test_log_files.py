"""The broker's console log: one file per start, a bounded number of previous starts kept."""

from __future__ import annotations

from orchestration.stack.log_files import rotate


def test_each_start_gets_a_fresh_log_and_only_the_last_starts_are_kept(tmp_path):
    log = tmp_path / "console.log"
    for start in range(6):
        rotate(log, keep=3)
        log.write_text(f"start {start}\n")
    assert log.read_text() == "start 5\n"
    assert [(tmp_path / f"console.log.{n}").read_text() for n in (1, 2, 3)] == ["start 4\n", "start 3\n", "start 2\n"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "console.log",
        "console.log.1",
        "console.log.2",
        "console.log.3",
    ]
