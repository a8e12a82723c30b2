"""Reading Kafka from Structured Streaming: Spark's own ``kafka`` source (spark-sql-kafka-0-10).

``kafka_stream`` returns a streaming DataFrame with Spark's Kafka columns (``key``, ``value``,
``topic``, ``partition``, ``offset``, ``timestamp``, ``timestampType``). Spark keeps the offsets in
the query's checkpoint, so a restarted query resumes at the last planned batch and replays it if it
was not committed.

This package had a second source, a Python streaming data source over confluent-kafka, for Sparks
without spark-sql-kafka. Measured on the same topic data it mirrored about a third as many rows
per second as Spark's source (docs/spark.md, bench/spark_mirror_throughput.py), and Spark's source
is what production runs, so it went: spark-sql-kafka is required (``--packages`` or ``spark.jars``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from pyspark.sql import DataFrame, SparkSession

from pgbridge_spark.kafka import FETCH_MAX_WAIT_MS

KAFKA_PROVIDER_CLASS: Final = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


class MissingKafkaSource(RuntimeError):
    """spark-sql-kafka (Spark's ``kafka`` source) is not on Spark's class path."""


def loadable(spark: SparkSession, class_name: str) -> bool:
    """True if ``class_name`` loads in Spark's JVM (False without a JVM gateway, e.g. Spark Connect)."""
    try:
        jvm = spark._jvm
        if jvm is None:  # no JVM gateway: nothing can be checked, so not usable
            return False
        jvm.java.lang.Class.forName(class_name, False, jvm.java.lang.Thread.currentThread().getContextClassLoader())
        return True
    except Exception:  # Py4J error, or Spark Connect (no JVM access)
        return False


def kafka_provider_available(spark: SparkSession) -> bool:
    """True if Spark's own Kafka source is on the classpath (checked through the JVM)."""
    return loadable(spark, KAFKA_PROVIDER_CLASS)


def missing_packages_message(spark: SparkSession, what: str, artifact: str) -> str:
    """What to add to Spark: the pinned Maven coordinates (``packages.ARTIFACTS``), or the running
    Spark's version for an artifact this package does not pin."""
    from pgbridge_spark.packages import ARTIFACTS

    pinned = next((a.coordinates for a in ARTIFACTS if a.name == artifact), f"org.apache.spark:{artifact}:{spark.version}")
    return (f"{what} is not on Spark's class path: start Spark with --packages {pinned} (spark-submit, or "
            "spark.jars.packages), or put its jar in spark.jars (`python -m pgbridge_spark.mirror` finds or fetches "
            "it itself)")


def require_kafka_source(spark: SparkSession) -> None:
    """Raise ``MissingKafkaSource``, naming the ``--packages`` coordinates, if spark-sql-kafka is missing."""
    if not kafka_provider_available(spark):
        raise MissingKafkaSource(missing_packages_message(spark, "Spark's kafka source (spark-sql-kafka-0-10)",
                                                          "spark-sql-kafka-0-10_2.13"))


def source_options(bootstrap: str, *, topics: Sequence[str] = (), pattern: str | None = None,
                   max_offsets_per_trigger: int | None = None,
                   kafka_options: Mapping[str, str] | None = None) -> dict[str, str]:
    """The options of Spark's ``kafka`` source for the job: the user's ``kafka_options`` (as
    ``kafka.*``) last, so they win over the job's defaults."""
    options = {
        # Spark's Kafka source reads uncommitted records unless told: never show aborted copies of
        # exactly-once topics (at-least-once topics have no aborted records, so this costs nothing).
        "failOnDataLoss": "true", "kafka.isolation.level": "read_committed",
        "kafka.fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),  # kafka.FETCH_MAX_WAIT_MS: why
        "kafka.bootstrap.servers": bootstrap, "startingOffsets": "earliest",
    }
    if topics:
        options["subscribe"] = ",".join(topics)
    if pattern:
        options["subscribePattern"] = pattern
    if max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    options.update({f"kafka.{key}": value for key, value in (kafka_options or {}).items()})
    return options


def kafka_stream(spark: SparkSession, bootstrap: str, *, topics: Sequence[str] = (), pattern: str | None = None,
                 max_offsets_per_trigger: int | None = None,
                 kafka_options: Mapping[str, str] | None = None) -> DataFrame:
    """A streaming DataFrame of Kafka records with Spark's Kafka columns, from Spark's ``kafka`` source."""
    require_kafka_source(spark)
    options = source_options(bootstrap, topics=topics, pattern=pattern,
                             max_offsets_per_trigger=max_offsets_per_trigger, kafka_options=kafka_options)
    return spark.readStream.format("kafka").options(**options).load()
