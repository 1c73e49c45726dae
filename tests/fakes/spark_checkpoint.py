"""A Structured Streaming checkpoint folder written by hand, as Spark lays it out: the offsets log
(`offsets/<batch id>` and its `.crc`), the commits log and the Kafka source's starting offsets. For
tests of code that reads a query's checkpoint without running Spark."""

from __future__ import annotations

import json
from pathlib import Path


def write_checkpoint(root: Path, topic: str, planned: list[dict[int, int]], committed: int) -> str:
    """A checkpoint at `root` whose batch i planned the end offsets `planned[i]` on `topic`, batches
    0..`committed` committed, the source begun at offset 0 of partitions 0 and 1; its path."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch_id, ends in enumerate(planned):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}}
        lines = ["v1", json.dumps(meta), json.dumps({topic: {str(p): o for p, o in ends.items()}})]
        (root / "offsets" / str(batch_id)).write_text("\n".join(lines))
        (root / "offsets" / f".{batch_id}.crc").write_bytes(b"crc")
    (root / "sources" / "0").mkdir(parents=True)
    (root / "sources" / "0" / "0").write_bytes(b"\x00v1\n" + json.dumps({topic: {"0": 0, "1": 0}}).encode())
    for batch_id in range(committed + 1):
        (root / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return str(root)
