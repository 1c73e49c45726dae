"""The real local stack esp runs on: JVM jars from Maven, the Kafka KRaft broker, Dagster."""
