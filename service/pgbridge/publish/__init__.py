"""Kafka I/O: produce with acks=all, create topics on first use, report deliveries to ack/."""
