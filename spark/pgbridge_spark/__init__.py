"""pgbridge on Spark: Structured Streaming reads pgbridge topics and mirrors the tables.

Modules, in data-flow order:

* ``source``  — a Spark 4 Python streaming data source over confluent-kafka (``format("pgbridge-kafka")``)
  with the same columns as Spark's own ``kafka`` source; ``kafka_stream`` picks one of the two.
* ``schemas`` — Avro writer schemas → Spark types; older and newer row schemas merged into the latest.
* ``decode``  — Avro bytes (single-object via ``{prefix}._schemas``, or Confluent wire format via a
  registry) → typed change rows.
* ``apply``   — pure planning of a micro-batch: dedup, per-key ordering, the transaction-consistent cut.
* ``mirror``  — the mirror job: Parquet copy per table, changelog mode, consistent mode.
"""

from pgbridge import __version__ as __version__  # one version for the whole distribution
