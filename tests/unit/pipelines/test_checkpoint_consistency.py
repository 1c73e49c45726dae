"""A checkpoint behind the channels' state (removed, or restored from an older copy) is refused."""

from __future__ import annotations

from pathlib import Path

from pipelines.streams.files import checkpoint_mismatch

CHECKPOINT = Path("/streams/s/checkpoint")


def test_channels_at_or_behind_the_planned_batch_fit():
    assert checkpoint_mismatch(CHECKPOINT, 7, {0: 7, 1: 6, 2: -1}) is None  # 0 applied the batch in flight
    assert checkpoint_mismatch(CHECKPOINT, None, {0: -1, 1: -1}) is None  # a first start
    assert checkpoint_mismatch(CHECKPOINT, None, {}) is None


def test_a_removed_checkpoint_under_existing_state_is_refused_with_the_repair():
    problem = checkpoint_mismatch(CHECKPOINT, None, {0: 41, 1: 42})
    assert problem is not None
    assert str(CHECKPOINT) in problem and "knows no batch" in problem and "channel 1" in problem
    assert "batch 42" in problem and "Restore the checkpoint" in problem


def test_a_checkpoint_restored_from_an_older_copy_is_refused():
    problem = checkpoint_mismatch(CHECKPOINT, 30, {0: 42, 1: 30, 2: 31})
    assert problem is not None and "batches up to 30" in problem and "2 channel(s) ahead" in problem
