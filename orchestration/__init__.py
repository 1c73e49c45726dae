"""Dagster code location and the `esp` command line; wires pipelines and elasticity together."""
