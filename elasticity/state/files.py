"""Filesystem helpers shared by durable state and the migration area: any `pyarrow.fs`
filesystem (local path by default, HDFS/S3/... by URI), atomic publish by write-temp-then-rename,
and Arrow IPC / Parquet table files.

Renames are atomic on local disks and HDFS; on object stores a rename is a copy, so readers
must still only trust files whose manifest or pointer has been published last (which is how
every caller here works).

Every published file ends with a checksum trailer (`#esp-crc32 <crc> <length>`), verified on
every read: a truncated or damaged file raises `CorruptFile` naming it, never a wrong value. On
a local disk a publish fsyncs the file before the rename and the directory after it, so a power
loss cannot leave a published name pointing at missing data; directories it creates are
fsynced into their parents for the same reason. (Object stores have no fsync; their put is
durable when it returns, so other filesystems keep pyarrow's stream and move.)
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from elasticity.state.uris import filesystem

TEMP_PREFIX = ".tmp-"
RowGroupChoice = Callable[[pq.FileMetaData], Sequence[int]]
"""Which row groups of a Parquet file to read, given its metadata."""
_TRAILER = re.compile(rb"\n#esp-crc32 ([0-9a-f]{8}) ([0-9]+)\n\Z")
# The trailer is short; a file's last bytes this long always contain all of it.
_TRAILER_MAX = 48


_DAMAGED = "it was damaged after esp wrote it"
# A payload that passes its checksum but does not parse was published that way (damage the
# checksum misses is a one-in-four-billion chance), so the cause is not damage on disk.
_WRITTEN_SO = "its checksum holds, so it was written like this"


class CorruptFile(ValueError):
    """A durable file that fails its checksum or cannot be parsed: it was damaged after it was
    written (or written by something else than esp). `problem` says what is wrong, `cause` why."""

    def __init__(self, path: str, problem: str, cause: str = _DAMAGED) -> None:
        super().__init__(
            f"{path} is corrupt: {problem}; {cause}. Restore it from a copy, or remove the stream's "
            "state and start it afresh"
        )
        self.path = path
        self.problem = problem


def seal(payload: bytes | memoryview) -> bytes:
    """The trailer that follows `payload` in a published file."""
    return b"\n#esp-crc32 %08x %d\n" % (zlib.crc32(payload), len(payload))


def unseal(path: str, raw: bytes | pa.Buffer, *, required: bool = True) -> memoryview:
    """The payload of a published file, checked against its trailer; CorruptFile if it fails.

    Without `required`, a file with no trailer (hand-written) is returned whole."""
    whole = memoryview(raw)
    match = _TRAILER.search(bytes(whole[-_TRAILER_MAX:]))
    if match is None:
        if not required:
            return whole
        raise CorruptFile(
            path,
            f"no checksum trailer at its end ({len(whole)} bytes)",
            "it was cut short, or not written by this esp (esp before checksums wrote none)",
        )
    stored_crc, length = int(match.group(1), 16), int(match.group(2))
    size = len(whole) - len(match.group(0))
    if length != size:
        raise CorruptFile(path, f"{size} bytes where {length} were written", "it was cut or added to since")
    payload = whole[:size]
    if (computed := zlib.crc32(payload)) != stored_crc:
        raise CorruptFile(path, f"checksum mismatch (stored {stored_crc:08x}, computed {computed:08x})")
    return payload


@dataclass(frozen=True)
class Location:
    """A directory on some pyarrow filesystem."""

    fs: pafs.FileSystem
    path: str

    @classmethod
    def of(cls, uri_or_path: str) -> Location:
        """A local path or a URI `uris` supports (file://, s3://, s3a://); UnsupportedScheme otherwise."""
        fs, path = filesystem(str(uri_or_path))
        return cls(fs, path)

    def child(self, *parts: str) -> Location:
        return Location(self.fs, "/".join([self.path, *parts]))

    def file(self, name: str) -> str:
        return f"{self.path}/{name}"

    def ensure(self) -> None:
        if isinstance(self.fs, pafs.LocalFileSystem):
            _make_dirs_durably(self.path)
        else:
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

    def clean_temporaries(self, older_than_s: float = 0.0) -> None:
        """Remove half-written files crashed writers left anywhere below this directory.

        With `older_than_s` 0, only for a process that is the one writer here (no live writer may be
        mid-publish); where other processes publish too (a stream's control folder), pass an age no
        live publish lasts, so only crashed writers' files go."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True, recursive=True))
        cutoff = time.time() - older_than_s
        for info in infos:
            if info.base_name.startswith(TEMP_PREFIX) and info.type == pafs.FileType.File:
                if older_than_s <= 0 or info.mtime is None or info.mtime.timestamp() < cutoff:
                    self.fs.delete_file(info.path)

    # ---- atomic, checksummed publication ----------------------------------------------------
    def _temp(self, name: str) -> str:
        return self.file(f"{TEMP_PREFIX}{uuid.uuid4().hex}-{name}")

    def publish_bytes(self, name: str, data: bytes | memoryview | pa.Buffer, *, sealed: bool = True) -> None:
        """Write `data` and its checksum under a temporary name, make it durable, rename it to `name`.

        `sealed=False` leaves the checksum out, for small documents people read and edit by hand
        (a policy override, a stop marker); they are still published atomically."""
        self.ensure()
        payload = memoryview(data)
        trailer = seal(payload) if sealed else b""
        temp, final = self._temp(name), self.file(name)
        if isinstance(self.fs, pafs.LocalFileSystem):
            _write_local_durably(temp, final, payload, trailer)
            return
        with self.fs.open_output_stream(temp) as out:
            out.write(payload)
            out.write(trailer)
        self.fs.move(temp, final)

    def read_document(self, name: str) -> bytes | None:
        """A hand-editable document as stored (no checksum expected); None if there is none."""
        if not self.exists(name):  # an object store's missing key is an OSError, not FileNotFoundError
            return None
        try:
            return self.read_raw(name)
        except FileNotFoundError:
            return None

    def modified_s(self, name: str) -> float | None:
        """When `name` was last written (seconds since the epoch); None if it does not exist."""
        info = self.fs.get_file_info(self.file(name))
        if info.type == pafs.FileType.NotFound:
            return None
        return None if info.mtime is None else info.mtime.timestamp()

    def read_bytes(self, name: str, *, verify: bool = True) -> bytes:
        """The payload of a published file, verified against its checksum (CorruptFile if it fails).

        `verify=False` is for files people may write by hand (requests): one without a
        trailer is returned whole; one with a trailer is still verified."""
        return bytes(unseal(self.file(name), self._raw(name), required=verify))

    def read_raw(self, name: str) -> bytes:
        """The file as stored, trailer and all, unverified: to set a damaged file aside, or a file
        esp did not write (Spark's checkpoint, a hand-written document)."""
        return self._raw(name).to_pybytes()

    def read_json(self, name: str) -> Any:
        """A published JSON document; CorruptFile if it fails its checksum or does not parse."""
        payload = self.read_bytes(name)
        try:
            return json.loads(payload)
        except ValueError as error:
            raise CorruptFile(self.file(name), f"not valid JSON ({error})", _WRITTEN_SO) from None

    def publish_ipc(self, name: str, table: pa.Table) -> None:
        """Arrow IPC file (fast, for changelogs and migration files), atomically."""
        self.publish_bytes(name, encode_ipc(table))

    def read_ipc(self, name: str) -> pa.Table:
        payload = unseal(self.file(name), self._raw(name))
        try:
            return ipc.open_file(pa.py_buffer(payload)).read_all()
        except (pa.ArrowException, OSError) as error:
            raise CorruptFile(self.file(name), f"not an Arrow IPC file ({error})", _WRITTEN_SO) from None

    def publish_parquet(self, name: str, table: pa.Table, row_group_rows: int | None = None) -> None:
        """Parquet file (compressed, for snapshots), atomically; `row_group_rows`: rows per row
        group (None: pyarrow's default), so that a reader can skip the groups it does not need."""
        self.publish_bytes(name, encode_parquet(table, row_group_rows))

    def read_parquet(self, name: str, row_groups: RowGroupChoice | None = None) -> pa.Table:
        """The whole table, or with `row_groups` only the row groups it picks from the file's
        metadata (the checksum still covers the whole file: it is read and checked whole)."""
        payload = unseal(self.file(name), self._raw(name))
        try:
            if row_groups is None:
                return pq.read_table(pa.BufferReader(pa.py_buffer(payload)))
            parquet = pq.ParquetFile(pa.BufferReader(pa.py_buffer(payload)))
            return parquet.read_row_groups(list(row_groups(parquet.metadata)))
        except (pa.ArrowException, OSError) as error:
            raise CorruptFile(self.file(name), f"not a Parquet file ({error})", _WRITTEN_SO) from None

    def _raw(self, name: str) -> pa.Buffer:
        # An Arrow buffer, not bytes: the tables read from it are views of it, with no copy. A
        # random-access file knows its size, so it is read in one piece (a stream grows a buffer).
        with self.fs.open_input_file(self.file(name)) as src:
            return src.read_buffer()


def encode_ipc(table: pa.Table) -> pa.Buffer:
    """`table` as the bytes of an Arrow IPC file, written into one buffer of the file's size.

    A growing `BufferOutputStream` reallocates and copies as it doubles: for a 2M-entry migration
    record (50 MB) that took 90-300 ms in a fresh process against 8-23 ms here. The dry run that
    measures the size only counts bytes."""
    counter = pa.MockOutputStream()
    _write_ipc(counter, table)
    buffer = pa.allocate_buffer(counter.size())
    _write_ipc(pa.FixedSizeBufferWriter(buffer), table)
    return buffer


def _write_ipc(sink: pa.NativeFile, table: pa.Table) -> None:
    with ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def encode_parquet(
    table: pa.Table, row_group_rows: int | None = None, dictionary_columns: Sequence[str] | None = None
) -> pa.Buffer:
    """`table` as the bytes of a Parquet file, in memory: the costly half of a publish, which can
    run before (and apart from) the quick, atomic half. `dictionary_columns`: the only columns
    dictionary-encoded (None: pyarrow's default, every column)."""
    sink = pa.BufferOutputStream()
    dictionary: bool | list[str] = True if dictionary_columns is None else list(dictionary_columns)
    pq.write_table(table, sink, row_group_size=row_group_rows, use_dictionary=dictionary)
    return sink.getvalue()


def _write_local_durably(temp: str, final: str, payload: memoryview, trailer: bytes) -> None:
    """Write, fsync, rename, fsync the directory: once this returns, `final` survives a power loss."""
    with open(temp, "wb") as out:
        out.write(payload)
        out.write(trailer)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, final)
    fsync_dir(os.path.dirname(final) or ".")


def _make_dirs_durably(path: str) -> None:
    """`path` with its missing parents, each new directory fsynced into its parent: a file
    fsynced into a directory whose own entry was lost is lost with it."""
    if os.path.isdir(path):
        return
    missing, folder = [], os.path.abspath(path)
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        missing.append(folder)
        folder = os.path.dirname(folder)
    os.makedirs(path, exist_ok=True)  # exist_ok: another writer may create it meanwhile
    for created in reversed(missing):
        fsync_dir(os.path.dirname(created))


def fsync_dir(path: str) -> None:
    """Make the entries of directory `path` (names created, renamed into it) durable."""
    folder = os.open(path, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
