"""Subprocess for the crash tests: runs one migration on a RocksDB backend and SIGKILLs
itself when the protocol reaches the named hook point (a prefix of a point name).

    python crash_worker.py <durable root> <local dir> <operation> <kill point>

Exit code 3 means the kill point was never reached (the test then fails).
"""

from __future__ import annotations

import os
import signal
import sys

from elasticity.layout import Layout
from elasticity.migration import Migrator
from elasticity.state import Int64Codec
from elasticity.state.kinds import build_backend, store_kind_named

OPERATIONS = {
    "scale_out": lambda layout: layout.scale_out(1),
    "scale_in": lambda layout: layout.scale_in(1),
    "split": lambda layout: layout.split(layout.channels[0]),
    "merge": lambda layout: layout.merge(layout.channels[1]),
}


def main(root: str, local_dir: str, operation: str, kill_point: str, kind: str = "rocks") -> int:
    def kill_here(point: str) -> None:
        if point.startswith(kill_point):
            os.kill(os.getpid(), signal.SIGKILL)

    backend = build_backend(store_kind_named(kind), Int64Codec(), root, local_dir)
    migrator = Migrator(root, backend, hook=kill_here, max_workers=2)
    old: Layout = migrator.registry.committed()
    migrator.migrate(OPERATIONS[operation](old))
    return 3


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
