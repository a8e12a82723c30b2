"""pgbridge: PostgreSQL logical replication (pgoutput) to Kafka as Avro.

The package is laid out as the data flow: ``source`` (Postgres I/O) → ``decode`` (pure pgoutput
parsing) → ``assemble`` (commit-ordered units) → ``encode`` (Avro) → ``publish`` (Kafka I/O) →
``ack`` (which LSN is safe to confirm). ``pipeline`` wires them together.
"""

from __future__ import annotations

# The one place the version is written: pyproject.toml reads it (dynamic), `pgbridge --version` prints it.
__version__ = "0.1.0"
