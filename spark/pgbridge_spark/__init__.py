"""pgbridge on Spark: Structured Streaming reads pgbridge topics and mirrors the tables.

Modules, in data-flow order:

* ``packages``   — the one Spark (4.1.1) and Delta Lake (4.2.0) this runs on, and the jars it needs.
* ``session``    — the job's SparkSession under ``python -m``, and the defaults it sets itself.
* ``source``     — Spark's own ``kafka`` source (spark-sql-kafka), read_committed; a clear error without it.
* ``kafka``      — confluent-kafka on the driver: ``{prefix}._schemas``, topic naming.
* ``schemas``    — Avro writer schemas → Spark types; older and newer row schemas merged into the latest.
* ``jvm_decode`` — the ``jvm`` decoder: spark-avro's ``from_avro`` per writer schema, latest schema as
  reader schema, where that is exact.
* ``decode``     — the ``python`` decoder (fastavro in ``mapInArrow``) and schema ids: single-object via
  ``{prefix}._schemas``, or Confluent wire format via a registry.
* ``progress``   — positions applied per table and partition, the transaction-consistent cut.
* ``merge``      — a batch reduced per key and the Delta ``MERGE`` it becomes (pure DataFrame plans).
* ``evolution``  — what a Delta table's columns must change before a batch (pure).
* ``delta``      — the Delta tables: create, evolve, MERGE, append, progress in commit metadata, upkeep.
* ``mirror``     — the mirror job: Delta table per table, changelog mode, consistent mode.
* ``reading``    — reading the mirror, every table at one consistent cut (``read_consistent``).
"""

from pgbridge import __version__ as __version__  # one version for the whole distribution
