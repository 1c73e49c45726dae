"""Batch recomputation from the bronze archive: daily aggregates per pipeline, and the
reconciliation of a stream's results with them. Pure Spark; knows nothing of Dagster."""
