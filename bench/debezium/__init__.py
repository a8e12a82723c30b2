"""Debezium 3.6.3 in a Kafka Connect standalone worker, as a benchmark anchor (never part of pgbridge)."""
