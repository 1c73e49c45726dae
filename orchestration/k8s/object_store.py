"""The object store on Kubernetes: an S3-compatible endpoint is a setting, its credentials a Secret.

esp does not run the store. Its endpoint and region reach the pods through their esp settings
file (`object_store`, with `KubernetesSettings.object_store_endpoint` as pods reach it); the
credentials reach them as the standard AWS variables from this Secret, which the AWS SDK's chain
(s3a's provider) and pyarrow both read. The rendered Secret holds placeholders, never real keys.
"""

from __future__ import annotations

from orchestration.k8s.objects import Document, metadata
from orchestration.k8s.settings import KubernetesSettings

CREDENTIAL_PLACEHOLDER = "REPLACE-ME"
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def credentials_secret(k8s: KubernetesSettings) -> Document:
    """The Secret the drivers, executors and Dagster pods read the store's credentials from (placeholders)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(k8s.object_store_secret, k8s.namespace, "object-store"),
        "type": "Opaque",
        "stringData": dict.fromkeys(CREDENTIAL_VARIABLES, CREDENTIAL_PLACEHOLDER),
    }
