"""The migration protocol in-process, on both backends: correctness, reports, barriers,
failures with rollback / roll-forward, and random operation sequences."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticity.hashing import hash_str
from elasticity.layout import Layout
from elasticity.migration import (
    LayoutRegistry,
    MigrationArea,
    MigrationError,
    Migrator,
    Phase,
    RescaleInProgress,
)
from elasticity.migration.journal import Journal
from elasticity.state import Int64Codec, Location, MemoryBackend, Version

from .migration_helpers import assert_owned_exactly_once, placement, populate

OPERATIONS = {
    "scale_out": lambda layout: layout.scale_out(1),
    "scale_out_3": lambda layout: layout.scale_out(3),
    "scale_in": lambda layout: layout.scale_in(1),
    "split": lambda layout: layout.split(layout.channels[1]),
    "merge": lambda layout: layout.merge(layout.channels[0]),
    "merge_into": lambda layout: layout.merge(layout.channels[0], into=layout.channels[-1]),
}


class InjectedFailure(RuntimeError):
    pass


def fail_at(prefix: str):
    def hook(point: str) -> None:
        if point.startswith(prefix):
            raise InjectedFailure(point)

    return hook


def start(make_backend, tmp_path: Path, n_channels: int = 4, n_keys: int = 600):
    backend = make_backend()
    root = str(tmp_path / "durable")
    layout = Layout.uniform(n_channels)
    expected = populate(backend, layout, n_keys)
    LayoutRegistry(Location.of(root)).initialize(layout)
    return backend, root, layout, expected


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_migration_moves_exactly_the_changed_keys(make_backend, tmp_path, operation) -> None:
    backend, root, old, expected = start(make_backend, tmp_path)
    new = OPERATIONS[operation](old)
    owners_before = {k: old.owner(hash_str(k)) for k in expected}
    report = Migrator(root, backend).migrate(new)
    layout = assert_owned_exactly_once(backend, root, expected)
    assert layout == new
    changed = sum(owners_before[k] != new.owner(hash_str(k)) for k in expected)
    assert report.keys_moved == changed > 0
    assert report.keys_total == len(expected)
    assert report.fraction_moved == pytest.approx(changed / len(expected))
    assert report.bytes_moved > 0
    assert report.operation == new.origin["op"]
    assert (report.old_epoch, report.new_epoch) == (old.epoch, new.epoch)
    assert set(report.phase_ms) == {"plan", "donate", "vertical_barrier", "collect", "commit", "finalize"}
    assert report.to_dict()["donate_collect_s"] >= 0


def test_untouched_channels_keep_their_state_and_version(make_backend, tmp_path) -> None:
    backend, root, old, _ = start(make_backend, tmp_path)
    new = old.split(2)
    before = placement(backend, old.channels)
    Migrator(root, backend).migrate(new)
    for channel in (0, 1, 3):
        assert dict(backend.open(channel).items()) == before[channel]
        assert backend.open(channel).version == Version(1, 0)
    assert backend.open(2).version == Version(1, new.epoch)


def test_stream_continues_on_the_new_layout(make_backend, tmp_path) -> None:
    backend, root, old, expected = start(make_backend, tmp_path)
    new = old.scale_out(1)
    Migrator(root, backend).migrate(new)
    key = next(k for k in expected if new.owner(hash_str(k)) == 4)
    store = backend.open(4)
    assert store.get(key) == expected[key]
    with store.begin(2) as tx:
        tx.put(key, -1)
    assert store.version == Version(2, new.epoch)
    expected[key] = -1
    assert_owned_exactly_once(backend, root, expected)


def test_horizontal_barrier_holds_until_commit(make_backend, tmp_path) -> None:
    backend, root, old, _ = start(make_backend, tmp_path)
    registry = LayoutRegistry(Location.of(root))
    seen: list[str] = []

    def observe(point: str) -> None:
        try:
            registry.routing_layout()
            seen.append(f"{point}:open")
        except RescaleInProgress:
            seen.append(f"{point}:closed")

    Migrator(root, backend, hook=observe).migrate(old.scale_out(1))
    assert seen and all(s.endswith(":closed") for s in seen)
    assert registry.routing_layout().epoch == old.epoch + 1


def test_journal_records_every_phase_in_order(make_backend, tmp_path) -> None:
    backend, root, old, _ = start(make_backend, tmp_path)
    new = old.scale_out(1)
    Migrator(root, backend).migrate(new)
    journal = Journal(MigrationArea(Location.of(root), new.epoch).journal_location, wall_clock=lambda: 0.0)
    assert journal.phases() == [
        Phase.PLANNED,
        Phase.DONATING,
        Phase.DONATED,
        Phase.COLLECTING,
        Phase.COLLECTED,
        Phase.COMMITTED,
        Phase.COMPLETE,
    ]


def test_phase_durations_come_from_the_injected_clock(make_backend, tmp_path) -> None:
    backend, root, old, _ = start(make_backend, tmp_path)
    ticks = itertools.count()
    report = Migrator(root, backend, clock=lambda: float(next(ticks))).migrate(old.scale_out(1))
    assert all(ms == 1000.0 for ms in report.phase_ms.values())  # one tick between start and end


@pytest.mark.parametrize(
    "failure_point", ["donate:file", "donate:manifest", "donated", "collect:prepared", "collect:applied", "collected"]
)
def test_failure_before_commit_can_be_rolled_back_exactly_and_rerun(make_backend, tmp_path, failure_point) -> None:
    backend, root, old, expected = start(make_backend, tmp_path)
    before = placement(backend, old.channels)
    new = old.scale_out(2)
    with pytest.raises(InjectedFailure):
        Migrator(root, backend, hook=fail_at(failure_point)).migrate(new)
    with pytest.raises(RescaleInProgress):
        LayoutRegistry(Location.of(root)).routing_layout()
    with pytest.raises(MigrationError):
        Migrator(root, backend).migrate(new)  # must recover first
    result = Migrator(root, backend).rollback()
    assert result.action == "rolled_back" and result.committed_epoch == old.epoch
    assert assert_owned_exactly_once(backend, root, expected) == old
    assert placement(backend, old.channels) == before
    with pytest.raises(MigrationError, match="never reused"):
        Migrator(root, backend).migrate(new)  # the rolled-back attempt's epoch is spent
    again = new.renumbered(LayoutRegistry(Location.of(root)).next_epoch())
    Migrator(root, backend).migrate(again)  # the same ring, re-run from scratch
    assert assert_owned_exactly_once(backend, root, expected) == again


def test_failure_after_the_vertical_barrier_rolls_forward_on_auto(make_backend, tmp_path) -> None:
    backend, root, old, expected = start(make_backend, tmp_path)
    new = old.scale_in(2)
    with pytest.raises(InjectedFailure):
        Migrator(root, backend, hook=fail_at("collect:applied")).migrate(new)
    result = Migrator(root, backend).recover()
    assert result.action == "rolled_forward"
    assert assert_owned_exactly_once(backend, root, expected) == new


def test_failure_after_commit_is_finished_by_recover(make_backend, tmp_path) -> None:
    backend, root, old, expected = start(make_backend, tmp_path)
    new = old.merge(1)
    with pytest.raises(InjectedFailure):
        Migrator(root, backend, hook=fail_at("committed")).migrate(new)
    with pytest.raises(MigrationError):
        Migrator(root, backend).migrate(new.scale_out(1))  # still pending: recover first
    assert Migrator(root, backend).recover("rollback").action == "finished"  # commit is final
    assert assert_owned_exactly_once(backend, root, expected) == new


def test_recover_with_nothing_pending_is_a_noop(make_backend, tmp_path) -> None:
    backend, root, old, expected = start(make_backend, tmp_path)
    result = Migrator(root, backend).recover()
    assert (result.action, result.committed_epoch) == ("nothing", old.epoch)
    with pytest.raises(MigrationError):
        Migrator(root, backend).rollback()
    assert_owned_exactly_once(backend, root, expected)


def test_wrong_epochs_and_non_monotone_layouts_are_refused(make_backend, tmp_path) -> None:
    backend, root, old, _ = start(make_backend, tmp_path)
    with pytest.raises(MigrationError):
        Migrator(root, backend).migrate(old.scale_out(1).scale_out(1))
    shuffled = Layout(old.epoch + 1, old.bounds, np.roll(old.owners, 1))  # same channels, all moved
    with pytest.raises(MigrationError):
        Migrator(root, backend).migrate(shuffled)


def test_rebalance_between_existing_channels_needs_consent(make_backend, tmp_path) -> None:
    backend, root, old, expected = start(make_backend, tmp_path)
    shuffled = Layout(old.epoch + 1, old.bounds, np.roll(old.owners, 1))
    Migrator(root, backend).migrate(shuffled, allow_rebalance=True)
    assert assert_owned_exactly_once(backend, root, expected) == shuffled


def test_temporary_leftovers_are_ignored(make_backend, tmp_path) -> None:
    backend, root, old, expected = start(make_backend, tmp_path)
    new = old.scale_out(1)
    area = MigrationArea(Location.of(root), new.epoch)
    area.location.child("donate", "from=0").publish_bytes(".tmp-crashed-to=4.arrow", b"half a file")
    Location.of(root).child("channels", "channel=1", "changelog").publish_bytes(".tmp-x-b9-m9.arrow", b"junk")
    Migrator(root, backend).migrate(new)
    assert_owned_exactly_once(backend, root, expected)


layout_ops = st.lists(
    st.tuples(st.sampled_from(["out", "in", "split", "merge"]), st.integers(0, 1000)), min_size=1, max_size=6
)


@settings(max_examples=25, deadline=None)
@given(start_n=st.integers(1, 6), ops=layout_ops, n_keys=st.integers(0, 300))
def test_no_key_is_lost_or_duplicated_across_random_operations(start_n, ops, n_keys) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        backend = MemoryBackend(Int64Codec())
        root = str(Path(tmp) / "durable")
        layout = Layout.uniform(start_n)
        expected = populate(backend, layout, n_keys)
        LayoutRegistry(Location.of(root)).initialize(layout)
        migrator = Migrator(root, backend, max_workers=2)
        for op, pick in ops:
            chosen = layout.channels[pick % layout.n_channels]
            if op == "out" or layout.n_channels == 1:
                layout = layout.scale_out(1 + pick % 2)
            elif op == "in":
                layout = layout.scale_in(1)
            elif op == "split":
                layout = layout.split(chosen)
            else:
                layout = layout.merge(chosen)
            migrator.migrate(layout)
            assert assert_owned_exactly_once(backend, root, expected) == layout


def test_registry_initializes_once_and_never_discards_the_committed_layout(tmp_path) -> None:
    from elasticity.migration import RegistryError

    registry = LayoutRegistry(Location.of(str(tmp_path)))
    with pytest.raises(RegistryError):
        registry.committed()
    first = Layout.uniform(2)
    assert registry.initialize(first) == first
    assert registry.initialize(Layout.uniform(5)) == first  # already initialized
    with pytest.raises(RegistryError):
        registry.discard(first.epoch)
    with pytest.raises(RegistryError):
        registry.commit(first.epoch + 1)  # never staged


@pytest.mark.parametrize("failure_point", ["rollback:withdrawn", "rollback:donations-removed"])
def test_an_interrupted_rollback_is_finished_even_after_the_barrier(make_backend, tmp_path, failure_point) -> None:
    backend, root, old, expected = start(make_backend, tmp_path)
    before = placement(backend, old.channels)
    new = old.scale_out(1)
    with pytest.raises(InjectedFailure):
        Migrator(root, backend, hook=fail_at("collect:applied")).migrate(new)  # barrier passed
    with pytest.raises(InjectedFailure):
        Migrator(root, backend, hook=fail_at(failure_point)).rollback()
    result = Migrator(root, backend).recover("forward")  # forward is no longer safe: must finish rolling back
    assert result.action == "rolled_back"
    assert assert_owned_exactly_once(backend, root, expected) == old
    assert placement(backend, old.channels) == before


def test_recover_removes_the_temporaries_of_crashed_writers(make_backend, tmp_path) -> None:
    backend, root, layout, expected = start(make_backend, tmp_path)
    crashed = [
        Path(root) / "layout" / ".tmp-0a1b-current.json",
        Path(root) / "channels" / "channel=1" / "changelog" / ".tmp-2c3d-b00000000000000000002-m0.arrow",
    ]
    for temp in crashed:
        temp.parent.mkdir(parents=True, exist_ok=True)
        temp.write_bytes(b"half-written")
    Migrator(root, backend).recover()
    assert [t for t in crashed if t.exists()] == []
    assert assert_owned_exactly_once(backend, root, expected) == layout


def test_a_crash_after_a_rolled_back_attempt_is_judged_by_its_own_journal(make_backend, tmp_path) -> None:
    """An epoch reused after a rollback shared the old attempt's journal, whose ROLLING_BACK
    made recover() roll the new attempt back although its vertical barrier had passed."""
    backend, root, old, expected = start(make_backend, tmp_path)
    with pytest.raises(InjectedFailure):
        Migrator(root, backend, hook=fail_at("collect:applied")).migrate(old.scale_out(1))
    assert Migrator(root, backend).rollback().action == "rolled_back"
    registry = LayoutRegistry(Location.of(root))
    retry = old.scale_out(1).renumbered(registry.next_epoch())
    assert retry.epoch == old.epoch + 2
    with pytest.raises(InjectedFailure):
        Migrator(root, backend, hook=fail_at("collect:applied")).migrate(retry)  # barrier passed
    result = Migrator(root, backend).recover()
    assert (result.action, result.committed_epoch) == ("rolled_forward", retry.epoch)
    assert assert_owned_exactly_once(backend, root, expected) == retry
    assert registry.previous() == old


def test_the_outcome_of_a_request_is_read_back_from_the_journal(make_backend, tmp_path) -> None:
    backend, root, old, _ = start(make_backend, tmp_path)
    with pytest.raises(InjectedFailure):
        Migrator(root, backend, hook=fail_at("donated")).migrate(old.scale_out(1), request_id="r-1")
    migrator = Migrator(root, backend)
    assert migrator.recorded_outcome("r-1", old.epoch + 1) is None  # still pending
    migrator.rollback()
    failed = migrator.recorded_outcome("r-1", old.epoch + 1)
    assert failed is not None and not failed.committed and "InjectedFailure" in (failed.error or "")
    new = old.scale_out(1).renumbered(migrator.registry.next_epoch())
    with pytest.raises(InjectedFailure):
        Migrator(root, backend, hook=fail_at("committed")).migrate(new, request_id="r-2")
    migrator.recover()  # the crash came after the commit: finished
    done = migrator.recorded_outcome("r-2", new.epoch)
    assert done is not None and done.committed
    assert migrator.recorded_outcome("someone-else", new.epoch) is None


def test_old_layouts_and_journals_are_forgotten_but_epochs_never_reused(make_backend, tmp_path) -> None:
    backend, root, layout, expected = start(make_backend, tmp_path, n_keys=60)
    registry = LayoutRegistry(Location.of(root))
    for i in range(8):
        layout = registry.committed()
        new = (layout.scale_out(1) if i % 2 == 0 else layout.scale_in(1)).renumbered(registry.next_epoch())
        Migrator(root, backend, keep_epochs=3).migrate(new)
    committed = assert_owned_exactly_once(backend, root, expected)
    staged = sorted(p.name for p in (tmp_path / "durable" / "layout").glob("epoch=*"))
    journals = sorted(p.name for p in (tmp_path / "durable" / "migrations").glob("epoch=*"))
    assert staged == [f"epoch={e:010d}.json" for e in (6, 7, 8)]
    assert journals == [f"epoch={e:010d}" for e in (6, 7, 8)]
    assert committed.epoch == 8 and registry.next_epoch() == 9
    assert registry.previous() is not None and registry.previous().epoch == 7


def test_forgetting_keeps_the_committed_its_previous_and_a_pending_epoch(tmp_path) -> None:
    registry = LayoutRegistry(Location.of(str(tmp_path)))
    registry.initialize(Layout.uniform(2))
    for epoch in range(1, 5):
        registry.location.publish_bytes(f"epoch={epoch:010d}.json", Layout.uniform(2, epoch=epoch).to_json().encode())
    registry._point("current.json", 1, previous=0)  # an old committed layout
    registry._point("pending.json", 2)
    assert registry.forget_old_epochs(keep=1) == [3]
    assert sorted(p.name for p in (tmp_path / "layout").glob("epoch=*")) == [
        f"epoch={e:010d}.json" for e in (0, 1, 2, 4)
    ]
