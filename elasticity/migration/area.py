"""The migration area: where donors put state for its new owners (Gedik et al.'s shared storage).

    <root>/migrations/epoch=<E>/donate/from=<a>/to=<b>.arrow   entries a gives to b (Arrow IPC)
    <root>/migrations/epoch=<E>/donate/from=<a>/manifest.json  written last: files, rows, bytes,
                                                              xxh3-64 checksums
    <root>/migrations/epoch=<E>/journal/...                    see `journal`

A donor's manifest is its "done" signal; the *vertical barrier* holds when every donor of the
plan has a manifest and every file it lists is present with the recorded size and checksum.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import pyarrow as pa
import xxhash

from elasticity.state.files import CorruptFile, Location, encode_ipc
from elasticity.state.records import concat_entries

_MANIFEST = "manifest.json"


@dataclass(frozen=True)
class DonatedFile:
    source: int
    target: int
    name: str
    rows: int
    bytes: int
    checksum: str


@dataclass(frozen=True)
class BarrierCheck:
    passed: bool
    problems: tuple[str, ...]


class MigrationArea:
    """Donation files and manifests of the migration to one layout epoch."""

    def __init__(self, root: Location, epoch: int) -> None:
        self.location = root.child("migrations", f"epoch={epoch:010d}")
        self.journal_location = self.location.child("journal")
        self._donate = self.location.child("donate")

    def _from(self, source: int) -> Location:
        return self._donate.child(f"from={source}")

    def write_donation(self, source: int, target: int, entries: pa.Table) -> DonatedFile:
        data = encode_ipc(entries)
        name = f"to={target}.arrow"
        self._from(source).publish_bytes(name, data)
        checksum = xxhash.xxh3_64_hexdigest(memoryview(data))
        return DonatedFile(source, target, name, entries.num_rows, data.size, checksum)

    def write_manifest(self, source: int, files: list[DonatedFile]) -> None:
        body = {"source": source, "files": [asdict(f) for f in files]}
        self._from(source).publish_bytes(_MANIFEST, json.dumps(body, sort_keys=True).encode())

    def manifest(self, source: int) -> list[DonatedFile] | None:
        where = self._from(source)
        if not where.exists(_MANIFEST):
            return None
        return [DonatedFile(**f) for f in where.read_json(_MANIFEST)["files"]]

    def donor_problems(self, source: int, targets: list[int]) -> list[str]:
        """Problems with one donor's donation ([] = complete and intact)."""
        files = self.manifest(source)
        if files is None:
            return [f"donor {source}: no manifest"]
        problems = []
        listed = {f.target for f in files}
        if listed != set(targets):
            problems.append(f"donor {source}: manifest lists targets {sorted(listed)}, plan needs {sorted(targets)}")
        for f in files:
            where = self._from(source)
            if not where.exists(f.name):
                problems.append(f"donor {source}: {f.name} missing")
                continue
            try:
                data = where.read_bytes(f.name)
            except CorruptFile as corrupt:
                problems.append(f"donor {source}: {corrupt.problem} in {f.name}")
                continue
            if len(data) != f.bytes or xxhash.xxh3_64_hexdigest(data) != f.checksum:
                problems.append(f"donor {source}: {f.name} is corrupt")
        return problems

    def vertical_barrier(self, donors: dict[int, list[int]]) -> BarrierCheck:
        """donors: source -> the targets the plan says it gives to."""
        problems = [p for source, targets in sorted(donors.items()) for p in self.donor_problems(source, targets)]
        return BarrierCheck(not problems, tuple(problems))

    def read(self, source: int, target: int) -> pa.Table:
        """The entries `source` donated to `target`; every planned pair has a file (maybe
        empty), so a missing one is an error, never "nothing to move"."""
        where = self._from(source)
        name = f"to={target}.arrow"
        if not where.exists(name):
            raise FileNotFoundError(f"donation {source}->{target} missing under {where.path}")
        return where.read_ipc(name)

    def incoming(self, target: int, sources: list[int]) -> pa.Table:
        return concat_entries([self.read(source, target) for source in sources])

    def outgoing(self, source: int, targets: list[int]) -> pa.Table:
        return concat_entries([self.read(source, target) for target in targets])

    def remove_donations(self) -> None:
        """Delete the moved data (the journal stays as the record of what happened)."""
        self._donate.delete_tree()
