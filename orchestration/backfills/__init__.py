"""Backfills: daily-partitioned Spark batch recomputation of each pipeline from its bronze
archive, the nightly schedule, and the Python API behind `esp backfill`."""
