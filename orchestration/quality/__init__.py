"""Data quality: Great Expectations 1.x suites run as Dagster asset checks (results tables,
dead-letter volume, state after a rescale), the stream-vs-batch reconciliation check, and the
validation schedule."""
