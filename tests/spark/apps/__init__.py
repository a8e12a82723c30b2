"""Spark applications the cluster tests submit with ``spark-submit`` (each runs as a script)."""
