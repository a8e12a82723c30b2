"""pgbridge on Spark: Structured Streaming reads pgbridge topics and mirrors the tables.

Modules, in data-flow order:

* ``source``     — Spark's own ``kafka`` source (spark-sql-kafka), read_committed; a clear error without it.
* ``kafka``      — confluent-kafka on the driver: ``{prefix}._schemas``, topic naming.
* ``schemas``    — Avro writer schemas → Spark types; older and newer row schemas merged into the latest.
* ``jvm_decode`` — the ``jvm`` decoder: spark-avro's ``from_avro`` per writer schema, latest schema as
  reader schema, where that is exact.
* ``decode``     — the ``python`` decoder (fastavro in ``mapInArrow``) and schema ids: single-object via
  ``{prefix}._schemas``, or Confluent wire format via a registry.
* ``progress``   — positions applied per table and partition, the transaction-consistent cut.
* ``merge``      — a table's changes merged into its mirror (pure DataFrame plans).
* ``mirror``     — the mirror job: Parquet copy per table, changelog mode, consistent mode.
"""

from pgbridge import __version__ as __version__  # one version for the whole distribution
