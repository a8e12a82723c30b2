"""JVM components (Apache Kafka, ...) fetched by Maven for the test suite and the benchmarks."""
