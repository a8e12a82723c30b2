"""The mirror job: pgbridge table topics → one Delta Lake (or Iceberg) table per Postgres table (or a
changelog), on Spark.

::

    Kafka (Spark's kafka source)                   per micro-batch (foreachBatch)
      {prefix}.{schema}.{table} ...   ──►  raw records ─► schema ids ─► resolve (_schemas | registry)
      {prefix}.transactions (consistent)         │
                                                 ▼
                decode per table into its latest row type (from_avro | mapInArrow)
                                                 │  drop what was applied (progress per partition,
                                                 ▼  from the table's last commit)
                              [consistent] cut = last commit LSN with every event read
                                                 │
       mirror: reduce to the last change per key, one MERGE  | history: SCD 2 | changelog: append
                                                 ▼
                     {output}/{schema}.{table}   (one commit per table and batch)

Exactly once (``formats``): each table's commit carries the job's progress on it (the batch id, the
per-partition positions applied), read back on start, so a replayed micro-batch is skipped and
records pgbridge re-published after a crash are dropped; Delta's commits also carry ``txnAppId`` /
``txnVersion``. ``--table-format`` picks Delta Lake (``delta_tables``) or Iceberg (``iceberg_tables``). Spark's checkpoint
holds the Kafka offsets. ``--output`` and ``--checkpoint`` are Hadoop filesystem URIs or paths;
nothing is kept anywhere else.

Run it: ``python -m pgbridge_spark.mirror --bootstrap-servers HOST:9092 --prefix pgbridge
--output /data/mirror --checkpoint /data/checkpoints/mirror`` (or the same arguments after
``spark-submit ... mirror.py``); ``--help`` lists the options.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import LongType, StructField, StructType

from pgbridge_spark.config import MirrorConfig, parse_args
from pgbridge_spark.consistent import Pending, find_cut, keep_pending, read_pending, with_pending
from pgbridge_spark.decode import (
    SchemaCatalog,
    header_schema_id,
    python_change_frame,
    schema_id_of,
)
from pgbridge_spark.delta_tables import MissingDelta
from pgbridge_spark.evolution import plan_schema, table_schema
from pgbridge_spark.formats import Commit, table_format, table_uri
from pgbridge_spark.iceberg_tables import MissingIceberg
from pgbridge_spark.java_stores import jvm_store_reader
from pgbridge_spark.jvm_decode import (
    JvmDecodeUnavailable,
    MissingSparkAvro,
    jvm_change_frame,
    require_spark_avro,
)
from pgbridge_spark.kafka import (
    UnsupportedKafkaOption,
    read_schema_topic,
    refuse_multi_table,
    table_topic_pattern,
)
from pgbridge_spark.merge import (
    COMMIT_LSN_COLUMN,
    HISTORY_FIELDS,
    KEY_HIGH,
    KEY_LOW,
    TOTAL_ORDER_COLUMN,
    UNREPRESENTABLE_COLUMN,
    UNREPRESENTABLE_MIRROR_TYPE,
    Position,
    batch_keys,
    bounded_to_batch,
    history_plan,
    history_source,
    key_bounds,
    keyed_plan,
    keyless_plan,
    keyless_source,
    mirror_rows,
    quoted,
    range_key,
    reduce_keyed,
    stored_entries,
)
from pgbridge_spark.packages import MissingJars
from pgbridge_spark.progress import TableProgress, new_changes_condition
from pgbridge_spark.schemas import EnvelopeSchema, change_type, record_to_struct, resolve_named
from pgbridge_spark.session import (
    apply_job_defaults,
    build_session,
    shuffle_partitions,
    sibling_session,
    table_workers,
)
from pgbridge_spark.source import MissingKafkaSource, kafka_stream

log = logging.getLogger("pgbridge_spark.mirror")

_HEADER: Final = "CASE WHEN substring({c}, 1, 1) = X'00' THEN substring({c}, 1, 5) ELSE substring({c}, 1, 10) END"
POSITION_FIELDS: Final = (StructField(UNREPRESENTABLE_COLUMN, UNREPRESENTABLE_MIRROR_TYPE, True),
                          StructField(COMMIT_LSN_COLUMN, LongType(), True),
                          StructField(TOTAL_ORDER_COLUMN, LongType(), True))


@dataclass(frozen=True)
class BatchResult:
    """Handed to the ``on_batch`` hook after a micro-batch is fully applied."""

    batch_id: int
    cut: int | None  # consistent mode: every transaction with commit LSN <= cut is applied
    tables: Mapping[str, str]  # "schema.table" → its table URI, for tables this batch changed
    applied_count: int
    seconds: float = 0.0  # wall time of the micro-batch's work (foreachBatch)


BatchHook = Callable[[int, BatchResult], None]


@dataclass
class _TableBatch:
    topic: str
    name: str  # "schema.table" as in the topic (sanitised)
    path: str
    progress: TableProgress
    row_type: StructType
    key_type: StructType | None
    schema_id: str
    cached: DataFrame  # decoded, not applied before, duplicates dropped (persisted)
    changes: DataFrame  # ``cached`` as far as this batch applies it (consistent mode: up to the cut)


@dataclass(frozen=True)
class _TableWork:
    """One table's part of a micro-batch, ready to commit: its changes, their statistics
    (``MirrorJob._stats``) and the positions after which dropped columns reset (``_resets``)."""

    table: _TableBatch
    stats: list[Any]
    resets: Mapping[str, Position]


class MirrorJob:
    """Build with a SparkSession and a ``MirrorConfig``; ``start()`` runs the streaming query.

    ``on_batch(batch_id, result)`` runs on the driver after each micro-batch is fully applied
    (tests read the mirror there).
    """

    def __init__(self, spark: SparkSession, config: MirrorConfig, on_batch: BatchHook | None = None) -> None:
        self.spark = spark
        self.config = config
        self.on_batch = on_batch
        self.tables = table_format(config.table_format)
        self.catalog = SchemaCatalog(
            load_schemas=lambda: read_schema_topic(config.bootstrap_servers, config.prefix, self._reader_options()),
            registry_url=config.schema_registry_url)
        self._reader: dict[str, str] | None = None  # the schema reader's librdkafka properties, once derived
        self._key_ids: dict[str, str] = {}
        self._texts: Mapping[str, str] = {}
        # the job's progress per table URI as last committed (read from the table's history once)
        self._progress: dict[str, TableProgress] = {}
        # table micro-batches decoded per decoder ("jvm" / "python"): the Python decoder also takes
        # what from_avro cannot decode exactly, and this says how often that happened
        self.decoder_counts: Counter[str] = Counter()

    # -- the query -------------------------------------------------------------------------------

    def stream(self) -> DataFrame:
        config = self.config
        topics = config.table_topics()
        if topics and config.consistent:
            topics.append(config.transactions_topic)
        pattern = None
        if not topics:
            pattern = table_topic_pattern(config.prefix)
            if config.consistent:
                pattern = rf"{re.escape(config.transactions_topic)}|{pattern}"
        return kafka_stream(self.spark, config.bootstrap_servers, topics=topics, pattern=pattern,
                            max_offsets_per_trigger=config.max_offsets_per_trigger,
                            kafka_options=config.kafka_options)

    def start(self, *, available_now: bool = False) -> StreamingQuery:
        if self.config.decoder == "jvm":
            require_spark_avro(self.spark)
        self.tables.require(self.spark)
        if self.config.schema_registry_url is None:  # a Java store the driver cannot open stops the start
            self._reader_options()
        apply_job_defaults(self.spark)
        self._progress.clear()
        writer = (self.stream().writeStream.foreachBatch(self.process_batch)
                  .option("checkpointLocation", self.config.checkpoint)
                  .queryName(f"pgbridge-mirror-{self.config.prefix}"))
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.config.trigger_seconds} seconds")
        return writer.start()

    def _reader_options(self) -> dict[str, str]:
        """The schema reader's librdkafka properties, derived once (``MirrorConfig.reader_options``):
        a Java store is opened by the driver's JVM at start, not again at every read of ``_schemas``."""
        if self._reader is None:
            self._reader = self.config.reader_options(jvm_store_reader(self.spark))
        return self._reader

    # -- one micro-batch -------------------------------------------------------------------------

    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        started = time.monotonic()
        raw = batch.select("key", "value", "topic", "partition", "offset").where("value IS NOT NULL")
        pending = Pending()
        if self.config.consistent:
            pending = read_pending(spark, self.config.output, self.config.app_id, batch_id)
            raw = with_pending(spark, raw, self.config.output, pending)
        spark.conf.set("spark.sql.shuffle.partitions", str(spark.sparkContext.defaultParallelism))
        raw = raw.persist()
        try:
            result = self._process(spark, raw, batch_id, pending)
        finally:
            raw.unpersist()
        result = replace(result, seconds=time.monotonic() - started)
        log.info("micro-batch %d: %d changes applied to %d tables in %.2f s", batch_id, result.applied_count,
                 len(result.tables), result.seconds)
        if self.on_batch is not None:
            self.on_batch(batch_id, result)

    def _process(self, spark: SparkSession, raw: DataFrame, batch_id: int, pending: Pending) -> BatchResult:
        config = self.config
        headers = (raw.select("topic", "partition", "offset", F.expr(_HEADER.format(c="key")).alias("kh"),
                              F.expr(_HEADER.format(c="value")).alias("vh"))
                   .groupBy("topic", "kh", "vh").agg(F.max("offset").alias("last"), F.count(F.lit(1)).alias("n"),
                                                     F.max(F.struct("offset", "partition")).alias("_"))
                   .collect())
        records = sum(int(r["n"]) for r in headers)
        spark.conf.set("spark.sql.shuffle.partitions",
                       str(shuffle_partitions(records, spark.sparkContext.defaultParallelism)))
        by_topic: dict[str, list[Any]] = {}
        for row in headers:
            by_topic.setdefault(row["topic"], []).append(row)
        texts = self.catalog.texts({i for row in headers for i in (header_schema_id(row["kh"]),
                                                                   header_schema_id(row["vh"])) if i})
        self._texts = texts
        tables = [self._table_batch(spark, raw, topic, rows, texts) for topic, rows in sorted(by_topic.items())
                  if topic != config.transactions_topic]
        found = None
        if config.consistent:
            found = find_cut(raw, [t.cached for t in tables], texts, config.transactions_topic,
                             set(config.tables) or None, pending.cut)
            for table in tables:
                table.changes = table.changes.where(f"transaction IS NULL OR commit_lsn <= {found.lsn}")
        cut = found.lsn if found is not None else None
        applied: dict[str, str] = {}
        count = 0
        try:
            # one table after the other: a table's statistics job also decodes it, and measured on
            # 2 cores, tables' decodes at once were slower than in turn (their MERGEs are not)
            work: list[_TableWork] = []
            for i, table in enumerate(tables):
                stats = self._stats(table)
                positions = self._schema_positions(stats)
                newest = max(positions, key=lambda k: positions[k]) if positions else None
                if newest is not None and newest != table.schema_id:
                    table.cached.unpersist()
                    table = tables[i] = self._table_batch(spark, raw, table.topic, by_topic[table.topic], texts,
                                                          schema_id=newest)
                    if cut is not None:
                        table.changes = table.changes.where(f"transaction IS NULL OR commit_lsn <= {cut}")
                    stats = self._stats(table)
                work.append(_TableWork(table, stats, self._resets(table, positions)))
            for table, n in self._apply_tables(spark, work, batch_id, cut):
                if n:
                    applied[table.name] = table.path
                    count += n
            if found is not None and not pending.done:
                keep_pending(spark, raw, [table.cached for table in tables], found, pending, output=config.output,
                             app_id=config.app_id, batch_id=batch_id, transactions_topic=config.transactions_topic)
        except Exception:
            self._progress.clear()  # what was committed is read back from the tables
            raise
        finally:
            for table in tables:
                table.cached.unpersist()
        self._upkeep(spark, applied, batch_id)
        return BatchResult(batch_id, cut, applied, count)

    def _load_progress(self, spark: SparkSession, path: str) -> TableProgress:
        if path not in self._progress:
            found = self.tables.last_progress(spark, path) if self.tables.is_table(spark, path) else None
            self._progress[path] = found[0] if found is not None else TableProgress()
        stored = self._progress[path]
        return TableProgress.from_metadata(stored.to_metadata())  # a copy: advanced before it is committed

    def _table_batch(self, spark: SparkSession, raw: DataFrame, topic: str, headers: list[Any],
                     texts: Mapping[str, str], schema_id: str | None = None) -> _TableBatch:
        name = topic[len(self.config.prefix) + 1:]
        path = table_uri(self.config.output, name)
        progress = self._load_progress(spark, path)
        if schema_id is None:
            newest = max(headers, key=lambda r: (r["_"]["offset"], r["_"]["partition"]))
            schema_id = header_schema_id(newest["vh"])
        assert schema_id is not None
        row_type = EnvelopeSchema.parse(texts[schema_id]).row_type
        key_ids = [r for r in headers if r["kh"] is not None]
        key_type = None
        if key_ids:
            key_id = header_schema_id(max(key_ids, key=lambda r: (r["_"]["offset"], r["_"]["partition"]))["kh"])
            assert key_id is not None
            self._key_ids[topic] = key_id
        refuse_multi_table(topic, texts.get(self._key_ids.get(topic, "")),
                           [texts[i] for i in {header_schema_id(r["vh"]) for r in headers} if i is not None and i in texts])
        if topic in self._key_ids:
            key_type = record_to_struct(resolve_named(json.loads(texts[self._key_ids[topic]])))
        records = raw.where(F.col("topic") == topic).select("topic", "partition", "offset", "key", "value")
        decoded = self._decode(spark, records, headers, texts, (schema_id, row_type),
                               (self._key_ids.get(topic), key_type))
        if not self.config.exactly_once:
            decoded = (decoded.where("transaction IS NOT NULL").dropDuplicates(["commit_lsn", "total_order"])
                       .unionByName(decoded.where("transaction IS NULL")))
        cached = decoded.persist()
        # ``cached`` keeps what was applied before (consistent mode counts a transaction's events
        # over all of them); ``changes`` is only what is new to this table
        changes = cached.where(new_changes_condition(progress))
        return _TableBatch(topic, name, path, progress, row_type, key_type, schema_id, cached, changes)

    def _decode(self, spark: SparkSession, records: DataFrame, headers: list[Any], texts: Mapping[str, str],
                value: tuple[str, StructType], key: tuple[str | None, StructType | None]) -> DataFrame:
        """Decoded change rows of one topic, by the configured decoder; the Python decoder takes
        a batch ``from_avro`` cannot decode exactly (``jvm_decode`` says when)."""
        (schema_id, row_type), (key_id, key_type) = value, key
        out_type = change_type(row_type, key_type)
        if self.config.decoder == "jvm":
            value_headers = {bytes(r["vh"]): schema_id_of(bytes(r["vh"]))[0] for r in headers if r["vh"] is not None}
            key_headers = {bytes(r["kh"]): schema_id_of(bytes(r["kh"]))[0] for r in headers if r["kh"] is not None}
            try:
                decoded = jvm_change_frame(records, texts=texts, value_headers=value_headers, schema_id=schema_id,
                                           key_headers=key_headers, key_id=key_id, out_type=out_type)
                self.decoder_counts["jvm"] += 1
                return decoded
            except JvmDecodeUnavailable as exc:
                log.info("Python decoder for this micro-batch: %s", exc)
        self.decoder_counts["python"] += 1
        timezone = spark.conf.get("spark.sql.session.timeZone") or "UTC"
        return python_change_frame(records, texts=texts, row_type=row_type, key_type=key_type, out_type=out_type,
                                   timezone=timezone)

    @staticmethod
    def _stats(table: _TableBatch) -> list[Any]:
        """One aggregation per table and batch: per (partition, writer schema) the count, the
        highest position, the highest truncate, whether TOAST values were left out and, for a single
        integral key, the lowest and highest key (``merge.key_bounds``)."""
        key = range_key(table.key_type)
        return (table.changes.groupBy("partition", "schema_id")
                .agg(F.count(F.lit(1)).alias("n"),
                     F.max(F.struct("commit_lsn", "total_order")).alias("top"),
                     F.max(F.when(F.col("op") == "t", F.struct("commit_lsn", "total_order"))).alias("truncate"),
                     F.max(F.when(F.col("op") == "t", F.col("source.ts_us"))).alias("truncate_time"),
                     F.max(F.size("unchanged_toast_columns")).alias("toast"),
                     *(key_bounds(key) if key is not None else []))
                .collect())

    @staticmethod
    def _schema_positions(stats: list[Any]) -> dict[str, Position]:
        """Highest position of the applied changes per writer schema. The newest decides the
        mirror's columns (a re-published old change may be the newest *record* of the batch, but
        not the newest change)."""
        out: dict[str, Position] = {}
        for r in stats:
            position = (r["top"]["commit_lsn"], r["top"]["total_order"])
            out[r["schema_id"]] = max(position, out.get(r["schema_id"], position))
        return out

    def _resets(self, table: _TableBatch, positions: Mapping[str, Position]) -> dict[str, Position]:
        """Per mirrored column, the highest position written by a schema without it (nor a name
        it was renamed from): the column was dropped after that position."""
        resets: dict[str, Position] = {}
        for schema_id, position in positions.items():
            present = {f.name for f in EnvelopeSchema.parse(self._texts[schema_id]).row_type.fields}
            for f in table.row_type.fields:
                names = {f.name, *f.metadata.get("aliases", [])}
                if not names & present and position > resets.get(f.name, (-1, -1)):
                    resets[f.name] = position
        return resets

    def _apply_tables(self, spark: SparkSession, work: Sequence[_TableWork], batch_id: int,
                      cut: int | None) -> list[tuple[_TableBatch, int]]:
        """Each table's commit of the micro-batch and the changes it applied. Up to
        ``session.table_workers`` tables at once, each through a session of its own (its commit
        options are session settings); every commit has ended, committed or failed, before the
        first failure is raised, so none is still running when the batch is given up. Tables are
        independent commits either way: a crash between them leaves some committed, which the
        replayed batch skips (``TableProgress.applied``)."""
        workers = table_workers(self.config.parallel_tables, len(work))
        if workers == 1:
            return [(w.table, self._apply(spark, w, batch_id, cut)) for w in work]
        sessions: queue.SimpleQueue[SparkSession] = queue.SimpleQueue()
        for _ in range(workers):
            sessions.put(sibling_session(spark))

        def apply(item: _TableWork) -> int:
            session = sessions.get()
            try:
                return self._apply(session, item, batch_id, cut)
            finally:
                sessions.put(session)

        with ThreadPoolExecutor(workers, thread_name_prefix="pgbridge-table") as pool:
            futures = [pool.submit(apply, item) for item in work]
        return [(item.table, future.result()) for item, future in zip(work, futures, strict=True)]

    def _apply(self, spark: SparkSession, work: _TableWork, batch_id: int, cut: int | None) -> int:
        table, stats, resets = work.table, work.stats, work.resets
        count = sum(int(r["n"]) for r in stats)
        if not count:
            return 0
        if table.progress.applied(self.config.app_id, batch_id):
            log.info("%s: micro-batch %d was committed before (replayed), skipped", table.name, batch_id)
            return 0
        partition_max: dict[int, Position] = {}
        for r in stats:
            position = (r["top"]["commit_lsn"], r["top"]["total_order"])
            partition_max[r["partition"]] = max(position, partition_max.get(r["partition"], position))
        truncates = [(r["truncate"]["commit_lsn"], r["truncate"]["total_order"]) for r in stats if r["truncate"]]
        truncate = max(truncates) if truncates else None
        truncate_time = max((r["truncate_time"] for r in stats if r["truncate_time"] is not None), default=None)
        progress = TableProgress.from_metadata(table.progress.to_metadata())
        progress.advance(partition_max, truncate)
        progress.key_fields = [f.name for f in table.key_type.fields] if table.key_type else []
        progress.schema_id, progress.app, progress.batch, progress.cut = table.schema_id, self.config.app_id, batch_id, cut
        commit = Commit(self.config.app_id, batch_id, progress.to_metadata())
        if self.config.mode == "changelog":
            frame = table.changes.drop("schema_id").withColumn("batch_id", F.lit(batch_id).cast("long"))
            self.tables.append(frame, table.path, commit, merge_schema=True)
        else:
            lows = [r[KEY_LOW] for r in stats if KEY_LOW in r and r[KEY_LOW] is not None]
            highs = [r[KEY_HIGH] for r in stats if KEY_HIGH in r and r[KEY_HIGH] is not None]
            key_range = (min(lows), max(highs)) if lows and highs else None
            self._write_mirror(spark, table, (truncate, truncate_time), any(r["toast"] > 0 for r in stats), resets,
                               commit, key_range, count)
        self._progress[table.path] = progress
        return count

    def _write_mirror(self, spark: SparkSession, table: _TableBatch, truncated: tuple[Position | None, int | None],
                      with_toast: bool, resets: Mapping[str, Position], commit: Commit,
                      key_range: tuple[int, int] | None, changes: int) -> None:
        """One commit: an append into a table with nothing stored yet, else one ``MERGE`` (bounded
        to the batch's key range when it has one, and to its keys when they are few and spread:
        ``merge.bounded_to_batch``)."""
        path, row_type = table.path, table.row_type
        truncate, truncate_time = truncated
        history = self.config.history and table.key_type is not None
        tables = self.tables
        if tables.is_table(spark, path):
            stored = tables.stored_schema(spark, path)
            plan = plan_schema(stored, row_type, resets)
            if not plan.empty:
                tables.evolve(spark, path, plan, stored)
            fresh = table.progress.app is None and not history and not tables.has_rows(spark, path)
        else:
            tables.create_table(spark, path, table_schema(row_type, POSITION_FIELDS + (HISTORY_FIELDS if history else ())))
            fresh = not history
        if history:
            assert table.key_type is not None
            keys = [f.name for f in table.key_type.fields]
            source = history_source(table.changes, row_type, keys, truncate)
            plan_of_merge = history_plan(row_type, keys, truncate, truncate_time)
        elif table.key_type is not None:
            keys = [f.name for f in table.key_type.fields]
            source = reduce_keyed(table.changes, row_type, keys, truncate, with_toast, resets)
            plan_of_merge = keyed_plan(row_type, keys, truncate)
        else:
            stored_rows = stored_entries(tables.read(spark, path), row_type)
            source = keyless_source(stored_rows, table.changes, row_type, truncate, resets)
            plan_of_merge = keyless_plan(row_type, truncate)
        if fresh:
            rows = mirror_rows(source, row_type, table.key_type is not None)
            if table.key_type is not None:
                # files of disjoint key ranges: a later MERGE skips every file its keys miss
                rows = rows.repartitionByRange(*[F.col(quoted(f.name)) for f in table.key_type.fields])
            tables.append(rows, path, commit)
        else:
            key = range_key(table.key_type)
            if key is not None and key_range is not None:
                plan_of_merge = bounded_to_batch(plan_of_merge, key, *key_range, changes,
                                                 lambda: [r["k"] for r in batch_keys(table.changes, key).collect()])
            tables.merge(spark, path, source, plan_of_merge, commit)

    def _upkeep(self, spark: SparkSession, applied: Mapping[str, str], batch_id: int) -> None:
        """Files per table after the batch (a log line), and compaction / retention when configured."""
        config = self.config
        compact = config.compact_every > 0 and (batch_id + 1) % config.compact_every == 0
        for name, path in sorted(applied.items()):
            if compact:
                self.tables.compact(spark, path, self._progress[path].to_metadata())
                if config.retention_hours is not None:
                    self.tables.vacuum(spark, path, config.retention_hours)
            log.info("table %s: %s files after micro-batch %d%s", name, self.tables.file_count(spark, path), batch_id,
                     " (compacted)" if compact else "")


# --- command line --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO is every gateway call and connection
    config, args = parse_args(argv)
    submitted = bool(os.environ.get("SPARK_ENV_LOADED")) or "spark.master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    master = args.master or (None if submitted else "local[2]")
    try:
        spark = build_session(master, jars=master is not None and not args.no_packages, table_format=config.table_format,
                              class_archive_dir=args.class_archive_dir, driver_java_options=args.driver_java_options,
                              **({"driver_memory": args.driver_memory} if args.driver_memory else {}))
        query = MirrorJob(spark, config).start(available_now=args.available_now)
    except (MissingJars, MissingDelta, MissingIceberg, MissingKafkaSource, MissingSparkAvro,
            UnsupportedKafkaOption) as exc:
        print(f"error: {exc}", file=sys.stderr)  # one line naming the fix, no traceback
        return 1
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
