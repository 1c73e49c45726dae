"""Offline checks of rendered manifests, before any cluster sees them.

Kubernetes' own kinds (Namespace, ServiceAccount, Role, ConfigMap, Service, StatefulSet, ...) are
validated strictly (no unknown field) against the JSON schemas of the Kubernetes API that the
`kubernetes-validate` package bundles, for `KubernetesSettings.kubernetes_version`: no network. It
is a dev dependency, imported when a check runs. Strimzi's resources and the Helm chart's values
are checked against esp's contract schemas (`contracts`), which say what they cover and what not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonschema

from orchestration.k8s.contracts import CUSTOM_RESOURCES, DAGSTER_VALUES, Schema, cross_document_problems
from orchestration.k8s.objects import Document, ManifestFile


class ValidatorMissing(ValueError):
    """kubernetes-validate is not installed (it is one of esp's dev dependencies)."""


@dataclass(frozen=True)
class Problem:
    """One finding: where (file, document) and what."""

    file: str
    document: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.document}: {self.message}"


def _describe(document: Document) -> str:
    """`Kind/name` of a Kubernetes object; `values` for a chart's values."""
    if "kind" not in document:
        return "values"
    return f"{document['kind']}/{(document.get('metadata') or {}).get('name', '?')}"


def _where(path: Any) -> str:
    return ".".join(str(part) for part in path) or "(top)"


def _contract_problems(document: Document, schema: Schema) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{_where(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]


def kubernetes_problems(document: Document, kubernetes_version: str) -> list[str]:
    """A built-in kind strictly against the bundled API schema; a custom resource against its contract."""
    key = (document.get("apiVersion"), document.get("kind"))
    if key in CUSTOM_RESOURCES:
        return _contract_problems(document, CUSTOM_RESOURCES[key])  # type: ignore[index]
    try:
        import kubernetes_validate
    except ImportError as err:
        raise ValidatorMissing(
            "kubernetes-validate is not installed: `make install` installs esp's dev dependencies"
        ) from err
    try:
        kubernetes_validate.validate(document, kubernetes_version, strict=True)
    except kubernetes_validate.ValidationError as err:
        return [f"{_where(err.path)}: {err.message}"]
    except kubernetes_validate.SchemaNotFoundError as err:
        return [f"no schema: {err.message}"]
    return []


def validate_files(files: tuple[ManifestFile, ...], kubernetes_version: str) -> list[Problem]:
    """Every document of every file, then what Strimzi's resources must agree on across files."""
    problems = []
    kubernetes_documents = []
    for manifest in files:
        for document in manifest.documents:
            if manifest.kind == "helm-values":
                found = _contract_problems(document, DAGSTER_VALUES)
            else:
                found = kubernetes_problems(document, kubernetes_version)
                kubernetes_documents.append(document)
            problems += [Problem(manifest.path, _describe(document), message) for message in found]
    if not problems:
        problems += [Problem("strimzi", "cross-check", m) for m in cross_document_problems(kubernetes_documents)]
    return problems
