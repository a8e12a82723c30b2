"""The mirror job: pgbridge table topics → one Parquet copy per table (or a changelog), on Spark.

::

    Kafka (Spark's kafka source)                   per micro-batch (foreachBatch)
      {prefix}.{schema}.{table} ...   ──►  raw records ─► schema ids ─► resolve (_schemas | registry)
      {prefix}.transactions (consistent)         │
                                                 ▼
                decode per table into its latest row type (from_avro | mapInArrow)
                                                 │  drop what was applied (progress per partition)
                                                 ▼
                              [consistent] cut = last commit LSN with every event read
                                                 │
                     mirror: merge into the table (per key, last position wins)  | changelog: append
                                                 ▼
                     {output}/{schema}.{table}/  (Parquet + _pgbridge_state.json, swapped in whole)

Idempotence. The table directory and its progress file are replaced together (written to a
staging directory, then renamed), and a change at or below the stored per-partition position is
dropped, so a micro-batch replayed after a crash, or a duplicate re-published by pgbridge, changes
nothing. Spark's checkpoint holds the Kafka offsets.

Run it: ``python -m pgbridge_spark.mirror --bootstrap-servers HOST:9092 --prefix pgbridge
--output /data/mirror --checkpoint /data/checkpoints/mirror`` (or the same arguments after
``spark-submit --packages ... spark/pgbridge_spark/mirror.py``); ``--help`` lists the options. Run
with ``python -m``, the session asks Spark for spark-sql-kafka and spark-avro itself
(``spark.jars.packages``, at the installed pyspark's version) unless ``--no-packages``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from pgbridge_spark.decode import (
    SchemaCatalog,
    decode_boundaries,
    header_schema_id,
    python_change_frame,
    schema_id_of,
)
from pgbridge_spark.jvm_decode import JvmDecodeUnavailable, jvm_change_frame, require_spark_avro
from pgbridge_spark.kafka import read_schema_topic, refuse_multi_table, table_topic_pattern, topic_name
from pgbridge_spark.merge import (
    COMMIT_LSN_COLUMN,
    TOTAL_ORDER_COLUMN,
    UNREPRESENTABLE_COLUMN,
    UNREPRESENTABLE_MIRROR_TYPE,
    Position,
    merge_keyed,
    merge_keyless,
)
from pgbridge_spark.progress import (
    ConsistentProgress,
    TableProgress,
    TransactionEnd,
    consistent_cut,
    new_changes_condition,
    read_json,
    write_atomically,
)
from pgbridge_spark.schemas import EnvelopeSchema, change_type, record_to_struct, resolve_named
from pgbridge_spark.source import kafka_stream

log = logging.getLogger("pgbridge_spark.mirror")

STATE_FILE: Final = "_pgbridge_state.json"
CONTROL_DIR: Final = "_pgbridge"
DECODERS: Final = ("jvm", "python")
DEFAULT_DECODER: Final = "jvm"
_HEADER: Final = "CASE WHEN substring({c}, 1, 1) = X'00' THEN substring({c}, 1, 5) ELSE substring({c}, 1, 10) END"


@dataclass
class MirrorConfig:
    bootstrap_servers: str
    prefix: str
    output: str
    checkpoint: str
    mode: str = "mirror"  # mirror | changelog
    consistent: bool = False
    decoder: str = DEFAULT_DECODER  # jvm (spark-avro's from_avro) | python (fastavro in mapInArrow)
    tables: Sequence[str] = ()  # "schema.table"; empty: every table topic of the prefix
    schema_registry_url: str | None = None
    max_offsets_per_trigger: int | None = None
    trigger_seconds: float = 1.0
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    # The topics come from pgbridge's kafka.exactly_once: read_committed sees no duplicate, so the
    # per-batch duplicate filter (a shuffle) is skipped.
    exactly_once: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ("mirror", "changelog"):
            raise ValueError(f"mode must be mirror or changelog, not {self.mode!r}")
        if self.decoder not in DECODERS:
            raise ValueError(f"decoder must be {' or '.join(DECODERS)}, not {self.decoder!r}")

    @property
    def transactions_topic(self) -> str:
        return topic_name(self.prefix, "transactions")

    def table_topics(self) -> list[str]:
        return [topic_name(self.prefix, *t.split(".", 1)) for t in self.tables]


@dataclass(frozen=True)
class BatchResult:
    """Handed to the ``on_batch`` hook after a micro-batch is fully applied."""

    batch_id: int
    cut: int | None  # consistent mode: every transaction with commit LSN <= cut is applied
    tables: Mapping[str, str]  # "schema.table" → its directory, for tables this batch changed
    applied_count: int


BatchHook = Callable[[int, BatchResult], None]


# --- directories ---------------------------------------------------------------------------------


def swap_in(staging: Path, target: Path) -> None:
    """Replace ``target`` by ``staging`` with two renames; ``recover`` finishes an interrupted swap."""
    old = target.parent / f".{target.name}.old"
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)


def recover(output: Path) -> None:
    """Undo what a crash mid-swap left: a missing table whose old copy is still there comes back;
    staging directories are dropped."""
    if not output.exists():
        return
    for entry in output.iterdir():
        if entry.name.startswith(".") and entry.name.endswith(".old"):
            target = output / entry.name[1:-len(".old")]
            if target.exists():
                shutil.rmtree(entry)
            else:
                os.rename(entry, target)
        elif entry.name.startswith(".staging-"):
            shutil.rmtree(entry, ignore_errors=True)
    control = output / CONTROL_DIR
    if control.exists():
        recover(control)


# --- the per-batch work --------------------------------------------------------------------------


def _with_positions(row_type: StructType) -> StructType:
    return StructType([*row_type.fields, StructField(UNREPRESENTABLE_COLUMN, UNREPRESENTABLE_MIRROR_TYPE, True),
                       StructField(COMMIT_LSN_COLUMN, LongType(), False),
                       StructField(TOTAL_ORDER_COLUMN, LongType(), False)])


def _project(df: DataFrame, source_type: StructType | None, row_type: StructType) -> list[Column]:
    """Columns of ``row_type`` from ``df`` (stored with ``source_type``): new ones null, retyped
    ones converted where Spark can (``try_cast``), dropped ones gone."""
    have = {f.name: f.dataType for f in (source_type.fields if source_type else [])}
    out = []
    for f in row_type.fields:
        if f.name not in have:
            out.append(F.lit(None).cast(f.dataType).alias(f.name))
        elif have[f.name] == f.dataType:
            out.append(F.col(f"`{f.name}`"))
        else:
            out.append(F.col(f"`{f.name}`").try_cast(f.dataType).alias(f.name))
    return out


@dataclass
class _TableBatch:
    topic: str
    name: str  # "schema.table" as in the topic (sanitised)
    directory: Path
    progress: TableProgress
    row_type: StructType
    key_type: StructType | None
    schema_id: str
    cached: DataFrame  # decoded, not applied before, duplicates dropped (persisted)
    changes: DataFrame  # ``cached`` as far as this batch applies it (consistent mode: up to the cut)


class MirrorJob:
    """Build with a SparkSession and a ``MirrorConfig``; ``start()`` runs the streaming query.

    ``on_batch(batch_id, result)`` runs on the driver after each micro-batch is fully applied
    (tests read the mirror there).
    """

    def __init__(self, spark: SparkSession, config: MirrorConfig, on_batch: BatchHook | None = None) -> None:
        self.spark = spark
        self.config = config
        self.on_batch = on_batch
        self.output = Path(config.output)
        self.catalog = SchemaCatalog(
            load_schemas=lambda: read_schema_topic(config.bootstrap_servers, config.prefix, config.kafka_options),
            registry_url=config.schema_registry_url)
        self._key_ids: dict[str, str] = {}
        self._texts: Mapping[str, str] = {}
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
                pattern = rf"{_escape(config.transactions_topic)}|{pattern}"
        return kafka_stream(self.spark, config.bootstrap_servers, topics=topics, pattern=pattern,
                            max_offsets_per_trigger=config.max_offsets_per_trigger,
                            kafka_options=config.kafka_options)

    def start(self, *, available_now: bool = False) -> StreamingQuery:
        if self.config.decoder == "jvm":
            require_spark_avro(self.spark)
        recover(self.output)
        writer = (self.stream().writeStream.foreachBatch(self.process_batch)
                  .option("checkpointLocation", self.config.checkpoint)
                  .queryName(f"pgbridge-mirror-{self.config.prefix}"))
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.config.trigger_seconds} seconds")
        return writer.start()

    # -- one micro-batch -------------------------------------------------------------------------

    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        config = self.config
        raw = batch.select("key", "value", "topic", "partition", "offset").where("value IS NOT NULL")
        pending_dir = self.output / CONTROL_DIR / "pending"
        consistent = ConsistentProgress.from_json(read_json(self.output / CONTROL_DIR / "consistent.json", "{}"))
        if config.consistent and pending_dir.exists():
            pending = self.spark.read.schema(raw.schema).parquet(str(pending_dir))
            raw = raw.unionByName(pending).dropDuplicates(["topic", "partition", "offset"])
        raw = raw.persist()
        try:
            self._process(raw, batch_id, consistent, pending_dir)
        finally:
            raw.unpersist()

    def _process(self, raw: DataFrame, batch_id: int, consistent: ConsistentProgress, pending_dir: Path) -> None:
        config = self.config
        headers = (raw.select("topic", "partition", "offset", F.expr(_HEADER.format(c="key")).alias("kh"),
                              F.expr(_HEADER.format(c="value")).alias("vh"))
                   .groupBy("topic", "kh", "vh").agg(F.max("offset").alias("last"),
                                                     F.max(F.struct("offset", "partition")).alias("_"))
                   .collect())
        by_topic: dict[str, list[Any]] = {}
        for row in headers:
            by_topic.setdefault(row["topic"], []).append(row)
        texts = self.catalog.texts({i for row in headers for i in (header_schema_id(row["kh"]),
                                                                   header_schema_id(row["vh"])) if i})
        tables = [self._table_batch(raw, topic, rows, texts) for topic, rows in sorted(by_topic.items())
                  if topic != config.transactions_topic]
        cut = None
        boundaries: list[tuple[int, int, int]] = []
        if config.consistent:
            cut, boundaries = self._cut(raw, tables, texts, consistent)
            for table in tables:
                table.changes = table.cached.where(f"transaction IS NULL OR commit_lsn <= {cut}")
        applied: dict[str, str] = {}
        count = 0
        self._texts = texts
        for i, table in enumerate(tables):
            stats = self._stats(table)
            positions = self._schema_positions(stats)
            newest = max(positions, key=lambda k: positions[k]) if positions else None
            if newest is not None and newest != table.schema_id:
                table.cached.unpersist()
                table = tables[i] = self._table_batch(raw, table.topic, by_topic[table.topic], texts,
                                                      schema_id=newest)
                if cut is not None:
                    table.changes = table.cached.where(f"transaction IS NULL OR commit_lsn <= {cut}")
                stats = self._stats(table)
            n = self._apply(table, batch_id, stats, self._resets(table, positions))
            if n:
                applied[table.name] = str(table.directory)
                count += n
        if config.consistent:
            assert cut is not None
            self._keep_pending(raw, tables, cut, boundaries, pending_dir)
            write_atomically(self.output / CONTROL_DIR / "consistent.json", ConsistentProgress(cut).to_json())
        for table in tables:
            table.cached.unpersist()
        if self.on_batch is not None:
            self.on_batch(batch_id, BatchResult(batch_id, cut, applied, count))

    def _table_batch(self, raw: DataFrame, topic: str, headers: list[Any], texts: Mapping[str, str],
                     schema_id: str | None = None) -> _TableBatch:
        name = topic[len(self.config.prefix) + 1:]
        directory = self.output / name
        progress = TableProgress.from_json(read_json(directory / STATE_FILE, "{}"))
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
        decoded = self._decode(records, headers, texts, (schema_id, row_type), (self._key_ids.get(topic), key_type))
        fresh = decoded.where(new_changes_condition(progress))
        if self.config.exactly_once:
            changes = fresh.persist()
        else:
            changes = (fresh.where("transaction IS NOT NULL").dropDuplicates(["commit_lsn", "total_order"])
                       .unionByName(fresh.where("transaction IS NULL"))).persist()
        return _TableBatch(topic, name, directory, progress, row_type, key_type, schema_id, changes, changes)

    def _decode(self, records: DataFrame, headers: list[Any], texts: Mapping[str, str],
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
        timezone = self.spark.conf.get("spark.sql.session.timeZone") or "UTC"
        return python_change_frame(records, texts=texts, row_type=row_type, key_type=key_type, out_type=out_type,
                                   timezone=timezone)

    @staticmethod
    def _stats(table: _TableBatch) -> list[Any]:
        """One aggregation per table and batch: per (partition, writer schema) the count, the
        highest position, the highest truncate and whether TOAST values were left out."""
        return (table.changes.groupBy("partition", "schema_id")
                .agg(F.count(F.lit(1)).alias("n"),
                     F.max(F.struct("commit_lsn", "total_order")).alias("top"),
                     F.max(F.when(F.col("op") == "t", F.struct("commit_lsn", "total_order"))).alias("truncate"),
                     F.max(F.size("unchanged_toast_columns")).alias("toast"))
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
        """Per mirrored column, the highest position written by a schema without it (see
        ``_reset_dropped``)."""
        resets: dict[str, Position] = {}
        for schema_id, position in positions.items():
            present = {f.name for f in EnvelopeSchema.parse(self._texts[schema_id]).row_type.fields}
            for f in table.row_type.fields:
                if f.name not in present and position > resets.get(f.name, (-1, -1)):
                    resets[f.name] = position
        return resets

    def _cut(self, raw: DataFrame, tables: list[_TableBatch], texts: Mapping[str, str],
             consistent: ConsistentProgress) -> tuple[int, list[tuple[int, int, int]]]:
        """The new cut, and ``(partition, offset, commit_lsn)`` of every boundary record read."""
        records = (raw.where(F.col("topic") == self.config.transactions_topic)
                   .select("partition", "offset", "value").collect())
        decoded = list(decode_boundaries(texts, [r["value"] for r in records]))
        ends = [TransactionEnd(b["commit_lsn"], {c["data_collection"]: c["event_count"]
                                                 for c in b["data_collections"] or []})
                for b in decoded if b["status"] == "END"]
        counts: dict[tuple[int, str], int] = {}
        for table in tables:
            for row in (table.cached.where("transaction IS NOT NULL")
                        .groupBy("commit_lsn", "source.schema", "source.table").count().collect()):
                counts[(row["commit_lsn"], f"{row['schema']}.{row['table']}")] = row["count"]
        mirrored = set(self.config.tables) or None
        cut = consistent_cut(consistent.cut, ends, counts, mirrored)
        return cut, [(r["partition"], r["offset"], b["commit_lsn"]) for r, b in zip(records, decoded, strict=True)]

    def _keep_pending(self, raw: DataFrame, tables: list[_TableBatch], cut: int,
                      boundaries: list[tuple[int, int, int]], pending_dir: Path) -> None:
        """Records past the cut wait in ``_pgbridge/pending`` (raw, so a later schema still applies)."""
        coordinates = StructType([StructField("topic", raw.schema["topic"].dataType, False),
                                  StructField("partition", IntegerType(), False),
                                  StructField("offset", LongType(), False)])
        keep = [t.cached.where(f"transaction IS NOT NULL AND commit_lsn > {cut}").select("topic", "partition", "offset")
                for t in tables]
        keep.append(self.spark.createDataFrame(
            [(self.config.transactions_topic, p, o) for p, o, lsn in boundaries if lsn > cut], coordinates))
        kept = raw.join(_union(keep), ["topic", "partition", "offset"], "left_semi")
        staging = pending_dir.parent / f".staging-pending-{os.getpid()}"
        kept.select("key", "value", "topic", "partition", "offset").write.mode("overwrite").parquet(str(staging))
        swap_in(staging, pending_dir)

    def _apply(self, table: _TableBatch, batch_id: int, stats: list[Any], resets: Mapping[str, Position]) -> int:
        count = sum(int(r["n"]) for r in stats)
        if not count:
            return 0
        partition_max: dict[int, Position] = {}
        for r in stats:
            position = (r["top"]["commit_lsn"], r["top"]["total_order"])
            partition_max[r["partition"]] = max(position, partition_max.get(r["partition"], position))
        truncates = [(r["truncate"]["commit_lsn"], r["truncate"]["total_order"]) for r in stats if r["truncate"]]
        truncate = max(truncates) if truncates else None
        progress = table.progress
        if self.config.mode == "changelog":
            table.directory.mkdir(parents=True, exist_ok=True)
            staging = table.directory / f".staging-{batch_id}"
            (table.changes.drop("schema_id").orderBy("commit_lsn", "total_order")
             .write.mode("overwrite").parquet(str(staging)))
            swap_in(staging, table.directory / f"batch_id={batch_id}")
        else:
            staging = self.output / f".staging-{table.name}-{batch_id}"
            self._write_mirror(table, truncate, any(r["toast"] > 0 for r in stats), resets, staging)
        progress.advance(partition_max, truncate)
        progress.row_type = table.row_type.json()
        progress.key_fields = [f.name for f in table.key_type.fields] if table.key_type else []
        progress.schema_id = table.schema_id
        if self.config.mode == "changelog":
            write_atomically(table.directory / STATE_FILE, progress.to_json())
        else:
            write_atomically(staging / STATE_FILE, progress.to_json())
            swap_in(staging, table.directory)
        return count

    def _write_mirror(self, table: _TableBatch, truncate: Position | None, with_toast: bool,
                      resets: Mapping[str, Position], staging: Path) -> None:
        progress = table.progress
        stored = StructType.fromJson(json.loads(progress.row_type)) if progress.row_type else None
        if stored is not None and table.directory.exists():
            existing = self.spark.read.schema(_with_positions(stored)).parquet(str(table.directory))
        else:
            existing = self.spark.createDataFrame([], _with_positions(stored or table.row_type))
        existing = existing.select(*_project(existing, stored, table.row_type), UNREPRESENTABLE_COLUMN,
                                   COMMIT_LSN_COLUMN, TOTAL_ORDER_COLUMN)
        if table.key_type is not None:
            key_fields = [f.name for f in table.key_type.fields]
            merged = merge_keyed(existing, table.changes, table.row_type, key_fields, truncate, with_toast,
                                 resets)
        else:
            merged = merge_keyless(existing, table.changes, table.row_type, truncate, resets)
        merged.write.mode("overwrite").parquet(str(staging))


def _union(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _escape(topic: str) -> str:
    import re
    return re.escape(topic)


# --- command line --------------------------------------------------------------------------------


def spark_packages(spark_version: str, scala: str = "2.13") -> str:
    """Maven coordinates of Spark's Kafka source and spark-avro for ``spark_version`` (``--packages``)."""
    return ",".join(f"org.apache.spark:{name}_{scala}:{spark_version}" for name in ("spark-sql-kafka-0-10", "spark-avro"))


def build_session(master: str | None = None, app_name: str = "pgbridge-mirror",
                  packages: str | None = None) -> SparkSession:
    """A SparkSession for the job; ``master`` and ``packages`` only when not under spark-submit."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    if packages:
        builder = builder.config("spark.jars.packages", packages)
    return builder.getOrCreate()


def parse_args(argv: Sequence[str] | None = None) -> tuple[MirrorConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m pgbridge_spark.mirror",
                                     description="Mirror pgbridge table topics into Parquet with Spark.")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--prefix", default="pgbridge", help="pgbridge kafka.topic_prefix")
    parser.add_argument("--output", required=True, help="directory with one Parquet directory per table")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint location")
    parser.add_argument("--mode", choices=("mirror", "changelog"), default="mirror")
    parser.add_argument("--consistent", action="store_true",
                        help="apply whole transactions only (uses {prefix}.transactions)")
    parser.add_argument("--source", choices=("auto", "kafka"), default="kafka",
                        help="kept for existing command lines: Spark's kafka source is the only source")
    parser.add_argument("--no-packages", action="store_true",
                        help="with python -m: do not ask Spark for spark-sql-kafka and spark-avro "
                             "(spark.jars.packages), they are on its class path already")
    parser.add_argument("--decoder", choices=DECODERS, default=DEFAULT_DECODER,
                        help="jvm: spark-avro's from_avro (needs spark-avro); python: fastavro on the executors")
    parser.add_argument("--tables", default="", help="comma list schema.table (default: every table topic)")
    parser.add_argument("--schema-registry-url", default=None)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--master", default=None, help="Spark master when not run by spark-submit")
    parser.add_argument("--exactly-once", action="store_true",
                        help="the topics come from pgbridge's kafka.exactly_once: skip the duplicate filter")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                        help="librdkafka / Kafka consumer property (repeatable)")
    args = parser.parse_args(argv)
    options = dict(item.split("=", 1) for item in args.kafka_option)
    config = MirrorConfig(bootstrap_servers=args.bootstrap_servers, prefix=args.prefix, output=args.output,
                          checkpoint=args.checkpoint, mode=args.mode, consistent=args.consistent,
                          decoder=args.decoder, tables=tuple(t for t in args.tables.split(",") if t),
                          schema_registry_url=args.schema_registry_url,
                          max_offsets_per_trigger=args.max_offsets_per_trigger, trigger_seconds=args.trigger_seconds,
                          kafka_options=options, exactly_once=args.exactly_once)
    return config, args


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config, args = parse_args(argv)
    master = args.master or (None if os.environ.get("SPARK_ENV_LOADED") or "spark.master" in os.environ.get(
        "PYSPARK_SUBMIT_ARGS", "") else "local[2]")
    packages = None
    if master is not None and not args.no_packages:
        import pyspark
        packages = spark_packages(pyspark.__version__)
    spark = build_session(master, packages=packages)
    query = MirrorJob(spark, config).start(available_now=args.available_now)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
