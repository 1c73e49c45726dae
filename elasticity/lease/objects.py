"""The three object-store calls a lease needs, on S3's API: read an object with its version (ETag),
create it only if absent (`If-None-Match: *`), replace it only if unchanged (`If-Match: <etag>`).

S3 (since 2024), MinIO, Ceph and moto refuse a conditional put that lost the race with HTTP 412
(or 409 for two concurrent ones), so of two writers racing for a lease exactly one wins. The
endpoint and credentials are the standard AWS settings of the environment (`AWS_ENDPOINT_URL`,
...), as for the rest of the state layer; they are read when the first client is built.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

# The store answers these when a conditional put loses (412), when two race (409), or when the
# object to replace is gone.
_LOST_RACE = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "412", "409", "404"})
_MISSING = frozenset({"NoSuchKey", "404"})


class ConditionFailed(RuntimeError):
    """The object changed (or appeared) since it was read: another writer was first."""


@dataclass(frozen=True)
class Versioned:
    """An object's bytes and the version a conditional put names."""

    data: bytes
    etag: str


class LeaseObjects:
    """S3 calls for one lease object; tests extend it with an in-memory store."""

    def read(self, bucket: str, key: str) -> Versioned | None:
        """The object and its ETag; None if there is none."""
        from botocore.exceptions import ClientError

        try:
            answer = self._client().get_object(Bucket=bucket, Key=key)
        except ClientError as err:
            if _code(err) in _MISSING:
                return None
            raise
        return Versioned(answer["Body"].read(), answer["ETag"])

    def create(self, bucket: str, key: str, data: bytes) -> str:
        """Write the object if there is none; its ETag, or ConditionFailed."""
        return self._put(bucket, key, data, IfNoneMatch="*")

    def replace(self, bucket: str, key: str, data: bytes, etag: str) -> str:
        """Overwrite the object if it is still the version `etag`; the new ETag, or ConditionFailed."""
        return self._put(bucket, key, data, IfMatch=etag)

    def _put(self, bucket: str, key: str, data: bytes, **condition: str) -> str:
        from botocore.exceptions import ClientError

        try:
            answer = self._client().put_object(Bucket=bucket, Key=key, Body=data, **condition)
        except ClientError as err:
            if _code(err) in _LOST_RACE:
                raise ConditionFailed(f"s3://{bucket}/{key} changed since it was read ({_code(err)})") from None
            raise
        return str(answer["ETag"])

    def _client(self) -> Any:
        environ = os.environ
        endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
        return _s3_client(endpoint, environ.get("AWS_ACCESS_KEY_ID"))


def _code(err: Any) -> str:
    error = err.response.get("Error", {})
    return str(error.get("Code") or err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


@functools.cache
def _s3_client(endpoint: str | None, access_key: str | None) -> Any:
    """One client per endpoint and key per process (a client costs ~50 ms to build; the fence
    reads the lease on every channel task's commit). The key is part of the cache so that a
    changed environment gets a new client."""
    import boto3
    from botocore.config import Config

    # Path-style addressing: a local store on 127.0.0.1 has no bucket subdomains.
    style = "path" if endpoint else "auto"
    config = Config(s3={"addressing_style": style}, connect_timeout=5, read_timeout=10, retries={"max_attempts": 3})
    return boto3.client("s3", endpoint_url=endpoint, config=config)
