"""Where a stream's files live, as one string: a local path or a URI (`file://`, `s3://`, `s3a://`).

Every folder of a stream is derived from its root here, never with `pathlib` (which reads
`file:///a` as the relative path `file:/a`). `canonical` is applied once, at the edge (config, CLI):
a relative path becomes absolute, and a `file://` URI becomes the plain path it names, so both
spellings of a local folder are the same string for Spark and for the state layer. `s3://` and
`s3a://` name the same object-store folder (pyarrow speaks `s3`, Spark's connector `s3a`); the
endpoint and credentials come from the usual AWS settings (e.g. `AWS_ENDPOINT_URL`), never the root.
Any other scheme is refused, naming it.
"""

from __future__ import annotations

import os
import posixpath
import re
import tempfile
from urllib.parse import unquote, urlsplit

import pyarrow.fs as pafs

LOCAL_SCHEMES = ("file",)
OBJECT_STORE_SCHEMES = ("s3", "s3a")
SUPPORTED_SCHEMES = LOCAL_SCHEMES + OBJECT_STORE_SCHEMES

# `scheme:/...`: a URI (Spark and Hadoop take `file:/a` as well as `file:///a`). A plain path with
# a colon in a folder name (`run:1/x`) has no slash right after it, so it stays a path.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/")


class UnsupportedScheme(ValueError):
    """A root whose URI scheme esp cannot store a stream under."""

    def __init__(self, root: str, scheme: str) -> None:
        super().__init__(
            f"stream folder {root!r} uses the URI scheme {scheme!r}, which esp does not support; "
            f"use a local path or one of {', '.join(s + '://' for s in SUPPORTED_SCHEMES)}"
        )
        self.scheme = scheme


class RemoteRoot(ValueError):
    """A local-only feature asked for the local folder of a root on an object store."""


def scheme_of(root: str) -> str | None:
    """The root's URI scheme in lower case (None: a plain path); UnsupportedScheme if esp has no use for it."""
    match = _SCHEME.match(root)
    if match is None:
        return None
    scheme = match.group(1).lower()
    if scheme not in SUPPORTED_SCHEMES:
        raise UnsupportedScheme(root, scheme)
    return scheme


def is_local(root: str) -> bool:
    """On this machine's file system (a path or a `file://` URI), so local-only features apply."""
    return scheme_of(root) in (None, *LOCAL_SCHEMES)


def canonical(root: str | os.PathLike[str]) -> str:
    """The one spelling of a root, made at the edge: an absolute local path, or `s3://bucket/key`."""
    text = os.fspath(root)
    scheme = scheme_of(text)
    if scheme is None:
        return os.path.abspath(os.path.expanduser(text))
    if scheme in LOCAL_SCHEMES:
        return _file_uri_path(text)
    parts = urlsplit(text)
    if not parts.netloc:
        raise ValueError(f"stream folder {text!r} names no bucket: write {scheme}://<bucket>/<folder>")
    if parts.query or parts.fragment:
        raise ValueError(
            f"stream folder {text!r} carries a query or fragment; the object store's endpoint and options "
            "come from the AWS settings (AWS_ENDPOINT_URL, ...), not the folder"
        )
    key = posixpath.normpath("/" + parts.path.lstrip("/")) if parts.path.strip("/") else ""
    return f"s3://{parts.netloc}{key}"


def join(root: str | os.PathLike[str], *parts: str) -> str:
    """`root/part/...`, the root's scheme kept (a URI stays a URI, a path stays a path)."""
    text = os.fspath(root)
    scheme_of(text)  # refuse an unsupported scheme wherever a folder is derived
    return "/".join([text.rstrip("/"), *(p.strip("/") for p in parts)])


def local_path(root: str, feature: str = "this") -> str:
    """The local path a local root names; RemoteRoot saying `feature` needs a local folder otherwise."""
    scheme = scheme_of(root)
    if scheme is None:
        return root
    if scheme in LOCAL_SCHEMES:
        return _file_uri_path(root)
    raise RemoteRoot(f"{feature} needs a local folder, and {root} is on an object store ({scheme}://)")


def local_cache(root: str) -> str:
    """A folder on this machine for what a root on an object store keeps locally (the channels'
    RocksDB working sets, rebuilt from the durable history when missing)."""
    parts = urlsplit(root)
    return os.path.join(tempfile.gettempdir(), "esp-local", parts.netloc, parts.path.strip("/"))


def filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a root and the root's path on it."""
    scheme = scheme_of(root)
    if scheme is None or scheme in LOCAL_SCHEMES:
        return pafs.LocalFileSystem(), local_path(root).rstrip("/") or "/"
    # pyarrow names the object store `s3`; Spark's connector `s3a`: one bucket, two spellings.
    fs, path = pafs.FileSystem.from_uri("s3" + root[len(scheme) :])
    return fs, path.rstrip("/")


def spark_path(root: str) -> str:
    """The root as Spark's Hadoop file systems read it (`s3a://` for the object store)."""
    scheme = scheme_of(root)
    if scheme in OBJECT_STORE_SCHEMES:
        return "s3a" + root[len(scheme or "") :]
    return root


def _file_uri_path(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"stream folder {uri!r} names host {parts.netloc!r}: a file:// URI must be on this machine")
    return os.path.normpath(unquote(parts.path)) if parts.path else "/"
