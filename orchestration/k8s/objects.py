"""What every rendered manifest shares: the files' type, object metadata, labels and names.

A `ManifestFile` is the seam between the renderers and the writer: a relative path, what the file
is (Kubernetes objects, or the values of a Helm chart) and its documents, plain mappings as they
will be written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pipelines.settings import SettingsError

Document = dict[str, Any]
"""One YAML document as it is written: a Kubernetes object or a chart's values."""

PART_OF = "esp"
"""The `app.kubernetes.io/part-of` label of every object esp renders."""


@dataclass(frozen=True)
class ManifestFile:
    """One file `esp k8s render` writes: its path under the output folder and its documents."""

    path: str
    kind: Literal["kubernetes", "helm-values"]
    documents: tuple[Document, ...]
    comment: str
    """The file's first lines (without '#'): what it is and how it is applied."""


def labels(component: str, **more: str) -> dict[str, str]:
    """The standard labels of an object of esp's `component`."""
    return {"app.kubernetes.io/part-of": PART_OF, "app.kubernetes.io/component": component, **more}


def metadata(name: str, namespace: str, component: str, **more_labels: str) -> Document:
    return {"name": name, "namespace": namespace, "labels": labels(component, **more_labels)}


def stream_object_name(stream: str, suffix: str = "") -> str:
    """`esp-stream-<stream>[-suffix]` as a Kubernetes name (a DNS label: '_' becomes '-'). The name
    without suffix also prefixes the stream's executor pods, which Spark allows 47 characters."""
    base = f"esp-stream-{stream.replace('_', '-')}"
    if len(base) > 47 or not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", base):
        raise SettingsError(
            f"stream {stream!r} gives the Kubernetes name {base!r}, not a DNS label of <= 47 characters"
        )
    return f"{base}-{suffix}" if suffix else base
