"""A short `esp soak` in every test run: both pipelines, the Dagster control room, a few seeded
kills and rescales, nothing lost or doubled, every malformed record dead-lettered.

The Dagster daemon and code server kills are left to `make test-long` (tests/integration/
test_soak_dagster.py, one kill each under a resize run) and the long soak: each restarts the whole
`dagster dev`, a minute or more on 2 cores, too long for every test run. The run goes on past its
minute and a half until 4 faults were drawn, so a busy host still sees several kills.

The long soak (`esp soak --minutes 30`) is `make soak`; this one keeps the harness itself honest
and catches a regression of the exactly-once path under faults in CI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.soak import DAGSTER_FAULTS, FAULTS
from tests.integration.streams import kill_tree

pytestmark = pytest.mark.integration

SOAK_TIMEOUT_S = 1500
"""The soak's own deadline: about 10 minutes on a slow 2-core machine, twice that on a slower one."""


@pytest.mark.timeout(SOAK_TIMEOUT_S + 120)  # past the soak's deadline, so its tree is killed first
def test_a_short_soak_loses_and_doubles_nothing(tmp_path):
    esp = str(Path(sys.executable).parent / "esp")
    report_path = tmp_path / "soak.json"
    faults = ",".join(f for f in FAULTS if f not in DAGSTER_FAULTS)
    command = [esp, "soak", "--minutes", "1.5", "--seed", "11", "--min-gap", "3", "--max-gap", "10"]
    command += ["--min-faults", "4", "--faults", faults]
    soak = subprocess.Popen(
        [*command, "--json", str(report_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = soak.communicate(timeout=SOAK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_tree(soak)
        stdout, stderr = soak.communicate()
        pytest.fail(f"the short soak ran past {SOAK_TIMEOUT_S} s:\n{stdout[-3000:]}{stderr[-3000:]}")
    finally:
        kill_tree(soak)  # an interrupted test too: nothing the soak started outlives it
    assert report_path.exists(), stdout[-3000:] + stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert (report["lost"], report["doubled"], report["violations"]) == (0, 0, []), report
    assert report["kills"] >= 2 and report["rescales"] >= 1, report
    assert report["keys_checked"]["wordcount"] > 100 and report["keys_checked"]["adclicks"] > 10, report
    assert report["dead_letters_found"] == report["dead_letters_expected"] > 0, report
    assert report["late_counted"]["adclicks"] > 0, report
    assert report_path.with_suffix(".png").stat().st_size > 10_000
    assert soak.returncode == 0, stdout[-3000:]
