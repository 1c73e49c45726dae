"""Ports for on-demand services come from below the kernel's ephemeral range, where no socket
binding port 0 or connecting out can be handed the same port between the check and the bind."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from orchestration.stack import ports
from orchestration.stack.errors import PortTakenError


def test_a_port_comes_from_below_the_ephemeral_range():
    first_ephemeral = ports.ephemeral_range_start()
    drawn = [ports.free_port() for _ in range(50)]
    assert all(ports.LOWEST_PORT <= port < first_ephemeral for port in drawn)
    assert len(set(drawn)) == len(drawn), "a port was handed out twice"


def test_the_range_is_read_from_the_kernel_setting_with_linuxs_default_when_absent(tmp_path: Path):
    setting = tmp_path / "ip_local_port_range"
    setting.write_text("40000\t60999\n")
    assert ports.ephemeral_range_start(setting) == 40000
    assert ports.ephemeral_range_start(tmp_path / "absent") == ports.LINUX_EPHEMERAL_START


def test_a_port_someone_listens_on_is_skipped_and_none_free_is_an_error(monkeypatch: pytest.MonkeyPatch):
    taken, free = ports.free_port(), ports.free_port()
    ports._handed_out.difference_update({taken, free})  # as if another process had picked them
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", taken))
        listener.listen()
        assert ports.free_port(rng=_draws(taken, free)) == free
        monkeypatch.setattr(ports, "ATTEMPTS", 3)
        with pytest.raises(PortTakenError, match="no free port"):
            ports.free_port(rng=_draws(taken, taken, taken))


def _draws(*sequence: int) -> random.Random:
    """A random source whose port draws are `sequence`, in order."""

    class Scripted(random.Random):
        def __init__(self) -> None:
            super().__init__()
            self.queue = list(sequence)

        def randrange(self, *_args, **_kwargs) -> int:  # type: ignore[override]
            return self.queue.pop(0)

    return Scripted()
