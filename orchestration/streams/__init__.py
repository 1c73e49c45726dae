"""The streams domain: long-running stream assets, their supervisor sensors, the load job."""
