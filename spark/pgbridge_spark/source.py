"""Reading Kafka from Structured Streaming: Spark's ``kafka`` source, or ours over confluent-kafka.

``kafka_stream`` returns a streaming DataFrame with Spark's Kafka columns (``key``, ``value``,
``topic``, ``partition``, ``offset``, ``timestamp``, ``timestampType``) from either:

* ``kafka``: Spark's own source (spark-sql-kafka on the classpath) — production;
* ``python``: ``PgbridgeKafkaSource`` below, a Spark 4 Python streaming data source;
* ``auto`` (default): ``kafka`` if its provider class loads in the JVM, else ``python``.

The Python source keeps its position where Spark keeps every source's: offsets are
``{topic: {partition: next offset}}`` dicts written to the query's checkpoint (offset log), so a
restarted query resumes at the last planned batch and replays it if it was not committed.
``latestOffset`` honours ``maxOffsetsPerTrigger`` (Spark 4.2+ admission control; older Sparks read
all available), and ``SupportsTriggerAvailableNow`` makes ``trigger(availableNow=True)`` work.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

try:  # Spark 4.2+
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - Spark 4.0/4.1
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

SOURCE_NAME: Final = "pgbridge-kafka"
KAFKA_PROVIDER_CLASS: Final = "org.apache.spark.sql.kafka010.KafkaSourceProvider"

KAFKA_SCHEMA: Final = StructType([
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType(), True),
    StructField("timestampType", IntegerType(), True),
])

Offsets = dict[str, dict[str, int]]


def _flatten(offsets: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, int], int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def _nest(flat: Mapping[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(flat.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def limit_offsets(start: Mapping[tuple[str, int], int], end: Mapping[tuple[str, int], int],
                  max_rows: int) -> dict[tuple[str, int], int]:
    """Ends that take at most ``max_rows`` records in all, shared by partitions in proportion to
    what each has available (as Spark's Kafka source does), at least one record if any is there."""
    available = {tp: max(end[tp] - start.get(tp, 0), 0) for tp in end}
    total = sum(available.values())
    if total <= max_rows:
        return dict(end)
    out = {}
    budget = max(max_rows, 1)
    for tp, count in available.items():
        share = count * budget // total
        out[tp] = start.get(tp, 0) + (max(share, 1) if count else 0)
    return out


class KafkaRange(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class PgbridgeKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets: ``{topic: {partition: next offset to read}}``."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Spark hands options over case-insensitively (lower-cased keys)
        self.options = {k.lower(): v for k, v in options.items()}
        opts = self.options
        self.bootstrap = opts["kafka.bootstrap.servers"]
        self.topics = [t for t in opts.get("subscribe", "").split(",") if t]
        self.pattern = opts.get("subscribepattern") or None
        if not self.topics and not self.pattern:
            raise ValueError(f"{SOURCE_NAME}: set subscribe (comma list) or subscribePattern")
        self.starting = opts.get("startingoffsets", "earliest")
        self.max_rows = int(opts["maxoffsetspertrigger"]) if "maxoffsetspertrigger" in opts else None
        self.probe = opts.get("endoffsets", "probe") != "watermark"
        self.read_timeout = float(opts.get("readtimeoutseconds", "60"))
        self.kafka_options = {k[len("kafka."):]: v for k, v in opts.items()
                              if k.startswith("kafka.") and k != "kafka.bootstrap.servers"}
        self._consumer: Any = None
        self._available_now: dict[tuple[str, int], int] | None = None

    # -- driver side ---------------------------------------------------------------------------

    def _driver_consumer(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            from pgbridge_spark.kafka import consumer_config
            self._consumer = Consumer(consumer_config(self.bootstrap, self.kafka_options))
        return self._consumer

    def _partitions(self) -> list[tuple[str, int]]:
        from pgbridge_spark.kafka import partitions_of
        return partitions_of(self._driver_consumer(), topics=self.topics, pattern=self.pattern)

    def _ends(self, floor: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        from pgbridge_spark.kafka import end_offsets
        return end_offsets(self._driver_consumer(), self._partitions(), floor=floor, probe=self.probe)

    def initialOffset(self) -> Offsets:
        if self.starting == "latest":
            return _nest(self._ends({}))
        if self.starting != "earliest":
            raise ValueError(f"{SOURCE_NAME}: startingOffsets must be earliest or latest")
        return _nest(dict.fromkeys(self._partitions(), 0))

    def latestOffset(self, start: Offsets | None = None, limit: Any = None) -> Offsets:
        begin = _flatten(start or {})
        ends = self._ends(begin)
        for tp in ends:  # a partition that appeared since: read it from its beginning
            begin.setdefault(tp, 0)
        if self._available_now is not None:
            ends = {tp: min(end, self._available_now.get(tp, begin[tp])) for tp, end in ends.items()}
        max_rows = None
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif limit is None and self.max_rows is not None and start is not None:
            max_rows = self.max_rows
        if max_rows is not None:
            ends = limit_offsets(begin, ends, max_rows)
        return _nest({tp: max(end, begin[tp]) for tp, end in ends.items()})

    def getDefaultReadLimit(self) -> Any:
        if self.max_rows is not None and ReadMaxRows is not None:
            return ReadMaxRows(self.max_rows)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._ends({})

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        begin, finish = _flatten(start), _flatten(end)
        return [KafkaRange(topic, partition, begin.get((topic, partition), 0), stop)
                for (topic, partition), stop in sorted(finish.items())
                if stop > begin.get((topic, partition), 0)]

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the checkpoint is the only record of progress (no group offsets)."""

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- executor side ---------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        from confluent_kafka import Consumer

        from pgbridge_spark.kafka import consumer_config, read_range
        assert isinstance(partition, KafkaRange)
        consumer = Consumer(consumer_config(self.bootstrap, self.kafka_options))
        try:
            for message in read_range(consumer, partition.topic, partition.partition, partition.start,
                                      partition.end, timeout=self.read_timeout):
                kind, millis = message.timestamp()
                timestamp = (dt.datetime.fromtimestamp(millis / 1000, dt.UTC) if kind else None)
                yield (message.key(), message.value(), partition.topic, partition.partition, message.offset(),
                       timestamp, kind if kind else None)
        finally:
            consumer.close()


class PgbridgeKafkaSource(DataSource):
    """``spark.readStream.format("pgbridge-kafka")``, options as Spark's kafka source:
    ``kafka.bootstrap.servers``, ``subscribe`` or ``subscribePattern``, ``startingOffsets``
    (earliest|latest), ``maxOffsetsPerTrigger``, ``kafka.<librdkafka key>``; plus ``endOffsets``
    (``probe``, default, or ``watermark`` to trust high watermarks) and ``readTimeoutSeconds``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PgbridgeKafkaStreamReader(self.options)


def kafka_provider_available(spark: SparkSession) -> bool:
    """True if Spark's own Kafka source is on the classpath (checked through the JVM)."""
    try:
        jvm = spark._jvm
        if jvm is None:  # no JVM gateway: Spark's Kafka source cannot be checked, so not usable
            return False
        jvm.java.lang.Class.forName(KAFKA_PROVIDER_CLASS, False, jvm.java.lang.Thread.currentThread().getContextClassLoader())
        return True
    except Exception:  # Py4J error, or Spark Connect (no JVM access)
        return False


def resolve_source(spark: SparkSession, choice: str) -> str:
    if choice not in ("auto", "kafka", "python"):
        raise ValueError(f"source must be auto, kafka or python, not {choice!r}")
    if choice == "auto":
        return "kafka" if kafka_provider_available(spark) else "python"
    return choice


def kafka_stream(spark: SparkSession, bootstrap: str, *, topics: Sequence[str] = (), pattern: str | None = None,
                 source: str = "auto", max_offsets_per_trigger: int | None = None,
                 kafka_options: Mapping[str, str] | None = None) -> DataFrame:
    """A streaming DataFrame of Kafka records with Spark's Kafka columns, from the chosen source."""
    chosen = resolve_source(spark, source)
    reader = spark.readStream
    if chosen == "python":
        spark.dataSource.register(PgbridgeKafkaSource)
        reader = reader.format(SOURCE_NAME)
    else:
        # Spark's Kafka source reads uncommitted records unless told: never show aborted copies of
        # exactly-once topics (at-least-once topics have no aborted records, so this costs nothing).
        reader = (reader.format("kafka").option("failOnDataLoss", "true")
                  .option("kafka.isolation.level", "read_committed"))
    reader = reader.option("kafka.bootstrap.servers", bootstrap).option("startingOffsets", "earliest")
    if topics:
        reader = reader.option("subscribe", ",".join(topics))
    if pattern:
        reader = reader.option("subscribePattern", pattern)
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    for key, value in (kafka_options or {}).items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load()
