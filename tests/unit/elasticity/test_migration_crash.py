"""Crash tests: a real subprocess runs a migration and is SIGKILLed at a phase boundary or in
the middle of a phase; `recover()` in a fresh process state must leave one committed layout,
every key owned exactly once, and every value equal to the pre-migration state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from elasticity.layout import Layout
from elasticity.migration import Journal, LayoutRegistry, MigrationArea, Migrator, Phase
from elasticity.state import Int64Codec, Location, RocksBackend
from elasticity.state.kinds import build_backend

from .migration_helpers import assert_owned_exactly_once, populate

REPO = Path(__file__).resolve().parents[3]
WORKER = Path(__file__).with_name("crash_worker.py")

CASES = [
    # (operation, kill point, recovery policy, expected recovery action)
    ("scale_out", "staged", "auto", "rolled_back"),  # barrier closed, nothing donated
    ("scale_out", "donate:file", "auto", "rolled_back"),  # mid-donate
    ("scale_out", "donate:manifest", "auto", "rolled_back"),  # one donor done, others not
    ("scale_out", "donated", "auto", "rolled_forward"),  # vertical barrier passed
    ("scale_out", "collect:prepared", "auto", "rolled_forward"),  # record durable, not applied
    ("scale_out", "collect:applied", "auto", "rolled_forward"),  # mid-collect
    ("scale_out", "committed", "auto", "finished"),  # pointer renamed, journal not written
    ("scale_out", "complete", "auto", "finished"),  # barrier not yet reopened
    ("scale_out", "collect:applied", "rollback", "rolled_back"),
    ("scale_out", "donate:manifest", "forward", "rolled_forward"),
    ("scale_in", "collect:applied", "auto", "rolled_forward"),
    ("scale_in", "finalize:dropped", "auto", "finished"),
    ("split", "collect:prepared", "rollback", "rolled_back"),
    ("merge", "collect:applied", "auto", "rolled_forward"),
]


@pytest.fixture(scope="session")
def worker_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Child env: compiled bytecode cached in a private folder so each kill costs little."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path_factory.mktemp("pycache"))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.parametrize("kind", ["rocks", "columnar"])
@pytest.mark.parametrize(("operation", "kill_point", "policy", "action"), CASES, ids=lambda v: str(v))
def test_sigkill_then_recover_keeps_every_key_once(
    tmp_path, worker_env, operation, kill_point, policy, action, kind
) -> None:
    root, local = str(tmp_path / "durable"), str(tmp_path / "local")
    initial = Layout.uniform(4)
    backend = build_backend(kind, Int64Codec(), root, local)
    expected = populate(backend, initial, n_keys=1500)
    LayoutRegistry(Location.of(root)).initialize(initial)
    backend.close()  # release RocksDB's locks for the child

    child = subprocess.run(
        [sys.executable, str(WORKER), root, local, operation, kill_point, kind],
        env=worker_env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, (
        f"not killed at {kill_point}: rc={child.returncode} {child.stderr[-2000:]}"
    )

    backend = build_backend(kind, Int64Codec(), root, local)
    try:
        result = Migrator(root, backend).recover(policy)
        assert result.action == action
        layout = assert_owned_exactly_once(backend, root, expected)
        assert layout.epoch == (initial.epoch if action == "rolled_back" else initial.epoch + 1)
        journal = Journal(MigrationArea(Location.of(root), initial.epoch + 1).journal_location, lambda: 0.0)
        assert journal.has(Phase.COMMITTED) == (action != "rolled_back"), journal.phases()
        # The stage can rescale again after recovery (a rolled-back attempt's epoch is spent).
        next_epoch = LayoutRegistry(Location.of(root)).next_epoch()
        assert next_epoch == initial.epoch + 2
        Migrator(root, backend).migrate(layout.scale_out(1).renumbered(next_epoch))
        assert_owned_exactly_once(backend, root, expected)
    finally:
        backend.close()


def test_recovery_survives_a_second_crash_during_recovery(tmp_path, worker_env) -> None:
    root, local = str(tmp_path / "durable"), str(tmp_path / "local")
    initial = Layout.uniform(3)
    backend = RocksBackend(Int64Codec(), durable=root, local_dir=local)
    expected = populate(backend, initial, n_keys=800)
    LayoutRegistry(Location.of(root)).initialize(initial)
    backend.close()
    first = subprocess.run(
        [sys.executable, str(WORKER), root, local, "scale_out", "collect:applied"],
        env=worker_env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert first.returncode == -signal.SIGKILL

    class Crash(RuntimeError):
        pass

    def crash_on_commit(point: str) -> None:
        if point == "committed":
            raise Crash(point)

    backend = RocksBackend(Int64Codec(), durable=root, local_dir=local)
    try:
        with pytest.raises(Crash):
            Migrator(root, backend, hook=crash_on_commit).recover()
        assert Migrator(root, backend).recover().action == "finished"
        assert assert_owned_exactly_once(backend, root, expected).epoch == initial.epoch + 1
    finally:
        backend.close()
