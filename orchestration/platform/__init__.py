"""The platform domain: the health of the local stack as seen from Dagster."""
