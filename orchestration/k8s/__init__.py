"""esp on Kubernetes, on paper: manifests rendered from esp's settings, never applied by esp.

`esp k8s render` writes them: Spark on Kubernetes for the stream drivers (`spark`), a KRaft Kafka
cluster through the Strimzi operator (`kafka`), the values of Dagster's official Helm chart
(`dagster_chart`) and a placeholder Secret for the object store (`object_store`); `render` puts
them together and writes them, `validate` checks them offline. See docs/kubernetes.md.
"""
