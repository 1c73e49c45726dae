"""Free ports for services esp starts on demand (tests, benchmarks), chosen where no other
process can be handed the same port a moment later.

A port found by binding port 0 comes from the kernel's ephemeral range, and the kernel hands the
same range out to every other socket that binds port 0 or connects out; between our check and the
service's own bind, a JVM's Py4J gateway or any client connection can take it (a CI run once had
the Dagster webserver's port answered by a Spark driver's gateway). Below that range the kernel
assigns nothing by itself, so a port free there stays free until someone asks for it by number.
"""

from __future__ import annotations

import random
from pathlib import Path

from orchestration.stack.errors import PortTakenError
from orchestration.stack.kafka_broker import ensure_port_free

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_EPHEMERAL_START = 32768
LOWEST_PORT = 15000
ATTEMPTS = 200

_handed_out: set[int] = set()


def ephemeral_range_start(range_file: Path = EPHEMERAL_RANGE_FILE) -> int:
    """The first port of the kernel's ephemeral range (Linux's default where the file is absent)."""
    try:
        return int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return LINUX_EPHEMERAL_START


def free_port(host: str = "127.0.0.1", *, rng: random.Random | None = None) -> int:
    """A port free on `host` below the ephemeral range, not handed out before by this process."""
    draw = rng or random.SystemRandom()
    highest = max(ephemeral_range_start() - 1, LOWEST_PORT + ATTEMPTS)
    for _ in range(ATTEMPTS):
        port = draw.randrange(LOWEST_PORT, highest + 1)
        if port in _handed_out:
            continue
        try:
            ensure_port_free(host, port)
        except PortTakenError:
            continue
        _handed_out.add(port)
        return port
    raise PortTakenError(f"no free port on {host} between {LOWEST_PORT} and {highest} after {ATTEMPTS} tries")
