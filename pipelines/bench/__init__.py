"""Benchmark harnesses for the stream jobs (no Dagster): the online elastic rescale against
Spark's offline state repartition, and elastic vs native word-count throughput."""
