"""Filesystem helpers shared by durable state and the migration area: any `pyarrow.fs`
filesystem (local path by default, HDFS/S3/... by URI), atomic publish by write-temp-then-rename,
and Arrow IPC / Parquet table files.

Renames are atomic on local disks and HDFS; on object stores a rename is a copy, so readers
must still only trust files whose manifest or pointer has been published last (which is how
every caller here works).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

TEMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class Location:
    """A directory on some pyarrow filesystem."""

    fs: pafs.FileSystem
    path: str

    @classmethod
    def of(cls, uri_or_path: str) -> Location:
        """A local path, or any URI pyarrow understands (file://, hdfs://, s3://, ...)."""
        if "://" in uri_or_path:
            fs, path = pafs.FileSystem.from_uri(uri_or_path)
            return cls(fs, path.rstrip("/"))
        return cls(pafs.LocalFileSystem(), str(uri_or_path).rstrip("/"))

    def child(self, *parts: str) -> Location:
        return Location(self.fs, "/".join([self.path, *parts]))

    def file(self, name: str) -> str:
        return f"{self.path}/{name}"

    def ensure(self) -> None:
        self.fs.create_dir(self.path, recursive=True)

    def names(self) -> list[str]:
        """Published (non-temporary) entry names in this directory; [] if it does not exist."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        return sorted(i.base_name for i in infos if not i.base_name.startswith(TEMP_PREFIX))

    def exists(self, name: str) -> bool:
        return self.fs.get_file_info(self.file(name)).type != pafs.FileType.NotFound

    def delete_file(self, name: str) -> None:
        if self.exists(name):
            self.fs.delete_file(self.file(name))

    def delete_tree(self) -> None:
        if self.fs.get_file_info(self.path).type != pafs.FileType.NotFound:
            self.fs.delete_dir(self.path)

    def clean_temporaries(self) -> None:
        """Remove half-written files crashed writers left anywhere below this directory.

        Only for a process that is the one writer here (no live writer may be mid-publish)."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True, recursive=True))
        for info in infos:
            if info.base_name.startswith(TEMP_PREFIX) and info.type == pafs.FileType.File:
                self.fs.delete_file(info.path)

    # ---- atomic publication -----------------------------------------------------------------
    def _temp(self, name: str) -> str:
        return self.file(f"{TEMP_PREFIX}{uuid.uuid4().hex}-{name}")

    def publish_bytes(self, name: str, data: bytes) -> None:
        """Write `data` under a temporary name, then rename it to `name`."""
        self.ensure()
        temp = self._temp(name)
        with self.fs.open_output_stream(temp) as out:
            out.write(data)
        self.fs.move(temp, self.file(name))

    def read_bytes(self, name: str) -> bytes:
        with self.fs.open_input_stream(self.file(name)) as src:
            return src.read()

    def publish_ipc(self, name: str, table: pa.Table) -> None:
        """Arrow IPC file (fast, for changelogs and migration files), atomically."""
        self.ensure()
        temp = self._temp(name)
        with self.fs.open_output_stream(temp) as out, ipc.new_file(out, table.schema) as writer:
            writer.write_table(table)
        self.fs.move(temp, self.file(name))

    def read_ipc(self, name: str) -> pa.Table:
        with self.fs.open_input_file(self.file(name)) as src:
            return ipc.open_file(src).read_all()

    def publish_parquet(self, name: str, table: pa.Table) -> None:
        """Parquet file (compressed, for snapshots), atomically."""
        self.ensure()
        temp = self._temp(name)
        pq.write_table(table, temp, filesystem=self.fs)
        self.fs.move(temp, self.file(name))

    def read_parquet(self, name: str) -> pa.Table:
        return pq.read_table(self.file(name), filesystem=self.fs)
