"""The health domain: alerts on failed stream and resize runs, freshness, SLO and dead-letter rate
checks on each stream asset, and each stream's dashboard (the last hour as a PNG)."""
