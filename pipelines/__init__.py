"""PySpark jobs of esp: Kafka sources, the elastic keyed stage, sinks, probes, load generation."""
