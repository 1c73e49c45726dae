"""The lease object of a stage on an object store: where it is, what it records (the holder, its
token, until when, whether it was given up) and whether it is held now."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

from elasticity.lease.holder import LEASE_FILE, Holder
from elasticity.lease.objects import LeaseObjects
from elasticity.state.files import Location


@dataclass(frozen=True)
class LeaseRecord:
    """The lease object's content: its holder, until when, and whether it was given up."""

    holder: Holder
    expires: float
    released: bool = False

    def encode(self) -> bytes:
        return json.dumps({**asdict(self.holder), "expires": self.expires, "released": self.released}).encode()

    @classmethod
    def decode(cls, data: bytes) -> LeaseRecord | None:
        """The record, or None if the object is not one (then nobody holds the lease)."""
        try:
            fields = json.loads(data)
            expires, released = float(fields.pop("expires")), bool(fields.pop("released"))
            return cls(Holder(**fields), expires, released)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def live(self, now: float, host: str) -> bool:
        """Held: not given up, not expired, and not a holder of this machine that is gone."""
        if self.released or self.expires <= now:
            return False
        return self.holder.host != host or process_exists(self.holder.pid)

    def detail(self, now: float) -> str:
        return f"; its lease expires in {max(0.0, self.expires - now):.0f} s unless renewed"


def lease_object(root: str) -> tuple[str, str]:
    """The bucket and key of the lease object of a stage at `root` (`s3://` or `s3a://`)."""
    parts = urlsplit(root)
    return parts.netloc, "/".join(p for p in (parts.path.strip("/"), LEASE_FILE) if p)


def read_store_record(root: str, objects: LeaseObjects | None = None) -> LeaseRecord | None:
    """The lease object's record (None: no lease object, or not a record). Read with `objects`
    when given, else through the state layer's pyarrow filesystem: the fence reads it before every
    commit in the executors' Python workers, which have pyarrow loaded, and importing boto3 there
    would cost each fresh worker ~1 s."""
    if objects is not None:
        found = objects.read(*lease_object(root))
        data = found.data if found is not None else None
    else:
        data = Location.of(root).read_document(LEASE_FILE)
    return LeaseRecord.decode(data) if data is not None else None


def process_exists(pid: int) -> bool:
    """A process with this pid exists on this machine (someone else's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    return True
