"""The mirror's Delta Lake tables: create, evolve, ``MERGE``, append, read progress, upkeep.

Not named ``delta``: ``spark-submit .../pgbridge_spark/mirror.py`` puts this folder first on the
driver's ``sys.path``, where a ``delta.py`` would hide delta-spark's ``delta`` package.

Every byte the job keeps lives in the Delta tables under ``--output`` (and Spark's checkpoint):
paths are Hadoop filesystem URIs (``hdfs://``, ``s3a://``, ``file:/``) or local paths, and nothing
here touches the driver's disk.

Exactly once. Each write of a micro-batch into a table is one Delta commit carrying
``txnAppId`` (the job, named by its checkpoint) and ``txnVersion`` (the batch id): Delta skips a
write whose version it has already recorded for that application, so a micro-batch replayed after
a crash changes nothing. The same commit's ``userMetadata`` holds the job's progress on that
table (``progress.TableProgress``: per Kafka partition the highest position applied, the
truncate, the batch, the consistent cut), read back from the table's history on start: no side
file. pgbridge re-publishes changes after its own crashes; the per-partition positions drop them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

from pgbridge_spark.evolution import SchemaPlan, mirrored_columns
from pgbridge_spark.merge import MergePlan, quoted, sql_string
from pgbridge_spark.packages import ARTIFACTS, DELTA_SESSION_CONF, DELTA_VERSION, missing_message
from pgbridge_spark.progress import TableProgress
from pgbridge_spark.source import loadable

log = logging.getLogger("pgbridge_spark.delta_tables")

DELTA_CLASS: Final = "io.delta.tables.DeltaTable"
USER_METADATA: Final = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID: Final = "spark.databricks.delta.write.txnAppId"
TXN_VERSION: Final = "spark.databricks.delta.write.txnVersion"
HISTORY_DEPTH: Final = 50
# New mirror tables: renames and drops in place (column mapping), MERGE without rewriting whole
# files (deletion vectors), int → long and wider decimals in place (type widening).
TABLE_PROPERTIES: Final[Mapping[str, str]] = {
    "delta.columnMapping.mode": "name",
    "delta.enableDeletionVectors": "true",
    "delta.enableTypeWidening": "true",
}


class MissingDelta(RuntimeError):
    """Delta Lake is not in the Spark session (jar or SQL extension missing)."""


def require_delta(spark: SparkSession) -> None:
    """One line naming the fix when delta-spark's jar or its session settings are missing."""
    if not loadable(spark, DELTA_CLASS):
        delta = [a for a in ARTIFACTS if a.group == "io.delta"]
        raise MissingDelta(missing_message(delta, f"Delta Lake {DELTA_VERSION} is not on Spark's class path"))
    extensions = spark.conf.get("spark.sql.extensions", None) or ""
    if DELTA_SESSION_CONF["spark.sql.extensions"] not in extensions:
        settings = " ".join(f"--conf {k}={v}" for k, v in DELTA_SESSION_CONF.items())
        raise MissingDelta(f"Delta Lake's SQL extension is not enabled in this Spark session: start it with {settings}")


def table_uri(output: str, name: str) -> str:
    return f"{output.rstrip('/')}/{name}"


def _sql_path(path: str, table_format: str = "delta") -> str:
    return f"{table_format}.{quoted(path)}"


def is_table(spark: SparkSession, path: str) -> bool:
    return bool(DeltaTable.isDeltaTable(spark, path))


@contextmanager
def commit_options(spark: SparkSession, app_id: str, version: int, metadata: str) -> Iterator[None]:
    """Session settings that make the DML inside one idempotent Delta commit carrying ``metadata``."""
    settings = {TXN_APP_ID: app_id, TXN_VERSION: str(version), USER_METADATA: metadata}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in settings:
            spark.conf.unset(key)


def last_progress(spark: SparkSession, path: str) -> tuple[TableProgress, int] | None:
    """The job's progress recorded in the table's newest commit that has one, and that commit's
    version (``None``: no pgbridge commit yet)."""
    history = DeltaTable.forPath(spark, path).history(HISTORY_DEPTH).select("version", "userMetadata").collect()
    if len(history) == HISTORY_DEPTH and not any(_progress(r["userMetadata"]) for r in history):
        history = DeltaTable.forPath(spark, path).history().select("version", "userMetadata").collect()
    for row in sorted(history, key=lambda r: -int(r["version"])):
        progress = _progress(row["userMetadata"])
        if progress is not None:
            return progress, int(row["version"])
    return None


def _progress(text: str | None) -> TableProgress | None:
    if not text:
        return None
    try:
        return TableProgress.from_metadata(text)
    except (ValueError, KeyError, TypeError):
        return None


def create_table(spark: SparkSession, path: str, schema: StructType,
                 properties: Mapping[str, str] = TABLE_PROPERTIES) -> None:
    """An empty Delta table at ``path`` (kept if one is already there)."""
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    for key, value in properties.items():
        builder = builder.property(key, value)
    builder.execute()


def convert_parquet(spark: SparkSession, path: str) -> None:
    """A Parquet folder made a Delta table in place (``CONVERT TO DELTA``: files whose names start
    with ``_`` are not data), with the properties of the job's own tables. A converted table starts
    at reader 1 / writer 2, and setting the features' properties alone would not upgrade it: column
    mapping with deletion vectors needs reader 3 / writer 7."""
    spark.sql(f"CONVERT TO DELTA {_sql_path(path, 'parquet')}")
    properties = {"delta.minReaderVersion": "3", "delta.minWriterVersion": "7", **TABLE_PROPERTIES}
    assignments = ", ".join(f"'{key}' = '{value}'" for key, value in properties.items())
    spark.sql(f"ALTER TABLE {_sql_path(path)} SET TBLPROPERTIES ({assignments})")


def stored_schema(spark: SparkSession, path: str) -> StructType:
    return DeltaTable.forPath(spark, path).toDF().schema


def _ddl(spark: SparkSession, data_type: DataType) -> str:
    """``data_type`` as Spark SQL (names quoted), from the JVM's own printer."""
    jvm = spark._jvm
    assert jvm is not None
    return str(jvm.org.apache.spark.sql.types.DataType.fromJson(data_type.json()).sql())


def evolve(spark: SparkSession, path: str, plan: SchemaPlan, stored: StructType) -> None:
    """Apply ``plan`` (``evolution.plan_schema``) to the table: metadata-only commits, except a
    retype Delta cannot widen in place, which rewrites the column with ``try_cast``."""
    table = _sql_path(path)
    for old, new in plan.renames:
        log.info("%s: column %s renamed to %s", path, old, new)
        spark.sql(f"ALTER TABLE {table} RENAME COLUMN {quoted(old)} TO {quoted(new)}")
    if plan.drops:
        log.info("%s: columns dropped: %s", path, ", ".join(plan.drops))
        spark.sql(f"ALTER TABLE {table} DROP COLUMNS ({', '.join(quoted(c) for c in plan.drops)})")
    if plan.adds:
        mirrored = [f.name for f in mirrored_columns(stored_schema(spark, path))]
        after = mirrored[-1] if mirrored else None
        for field in plan.adds:
            position = f" AFTER {quoted(after)}" if after else " FIRST"
            spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({quoted(field.name)} {_ddl(spark, field.dataType)}{position})")
            after = field.name
        log.info("%s: columns added: %s", path, ", ".join(f.name for f in plan.adds))
    for name, data_type in plan.retypes:
        try:
            spark.sql(f"ALTER TABLE {table} ALTER COLUMN {quoted(name)} TYPE {_ddl(spark, data_type)}")
            log.info("%s: column %s widened to %s", path, name, data_type.simpleString())
        except Exception as exc:  # Delta refuses: not a widening it supports
            log.info("%s: column %s rewritten as %s (%s)", path, name, data_type.simpleString(),
                     str(exc).splitlines()[0][:200])
            current = spark.read.format("delta").load(path)
            columns = [F.col(quoted(c)).try_cast(data_type).alias(c) if c == name else F.col(quoted(c))
                       for c in current.columns]
            (current.select(*columns).write.format("delta").mode("overwrite").option("overwriteSchema", "true")
             .save(path))


def merge(spark: SparkSession, path: str, source: DataFrame, plan: MergePlan) -> None:
    """One ``MERGE`` of ``source`` (alias ``s``) into the table (alias ``t``)."""
    builder = DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), plan.condition)
    if plan.delete_when is not None:
        builder = builder.whenMatchedDelete(plan.delete_when)
    if plan.update_when is not None:
        builder = builder.whenMatchedUpdate(plan.update_when, set=dict(plan.update))
    builder = builder.whenNotMatchedInsert(plan.insert_when, values=dict(plan.insert))
    if plan.truncate_before is not None:
        lsn, order = plan.truncate_before
        t_lsn, t_order = "t._pgbridge_commit_lsn", "t._pgbridge_total_order"
        before = f"({t_lsn} < {lsn} OR ({t_lsn} = {lsn} AND {t_order} < {order}))"
        if plan.truncate_update is None:
            builder = builder.whenNotMatchedBySourceDelete(before)
        else:
            builder = builder.whenNotMatchedBySourceUpdate(f"t._pgbridge_current AND {before}",
                                                           set=dict(plan.truncate_update))
    builder.execute()


def append(frame: DataFrame, path: str, app_id: str, version: int, metadata: str, *,
           mode: str = "append", options: Mapping[str, str] | None = None) -> None:
    """One idempotent write (``txnAppId``/``txnVersion``) carrying ``metadata``."""
    writer = (frame.write.format("delta").mode(mode).option("txnAppId", app_id).option("txnVersion", str(version))
              .option("userMetadata", metadata))
    for key, value in (options or {}).items():
        writer = writer.option(key, value)
    writer.save(path)


def mark(spark: SparkSession, path: str, app_id: str, version: int, metadata: str,
         properties: Mapping[str, str]) -> None:
    """A commit that changes no data (``SET TBLPROPERTIES``) carrying ``metadata``: a tenth of a
    second, where even a write of nothing costs a second of Spark jobs (planning, an empty write,
    the post-commit state). Delta records no ``txn`` action for it (the transaction options apply
    to writes), so whether the job made it already is read from ``metadata`` (``last_progress``)."""
    settings = ", ".join(f"{sql_string(key)} = {sql_string(value)}" for key, value in sorted(properties.items()))
    with commit_options(spark, app_id, version, metadata):
        spark.sql(f"ALTER TABLE {_sql_path(path)} SET TBLPROPERTIES ({settings})")


def file_count(spark: SparkSession, path: str) -> int | None:
    """Files of the table's newest version as this session knows it, from the checksum Delta
    writes with each commit (``_delta_log/N.crc``): no Spark job, unlike ``DESCRIBE DETAIL``.
    ``None`` when that version has no checksum."""
    jvm = spark._jvm
    assert jvm is not None
    snapshot = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).unsafeVolatileSnapshot()
    checksum = snapshot.checksumOpt()
    return int(checksum.get().numFiles()) if checksum.isDefined() else None


def has_rows(spark: SparkSession, path: str) -> bool:
    return bool(spark.read.format("delta").load(path).limit(1).count())


def compact(spark: SparkSession, path: str, metadata: str) -> None:
    """Bin-pack small files (``OPTIMIZE``); the commit keeps the job's progress."""
    spark.conf.set(USER_METADATA, metadata)
    try:
        DeltaTable.forPath(spark, path).optimize().executeCompaction()
    finally:
        spark.conf.unset(USER_METADATA)


def vacuum(spark: SparkSession, path: str, retention_hours: float) -> None:
    DeltaTable.forPath(spark, path).vacuum(retention_hours)


# --- reading ---------------------------------------------------------------------------------------


def versions_with_cut(spark: SparkSession, path: str) -> list[tuple[int, int]]:
    """``(version, cut)`` of every commit of the table that records a consistent cut."""
    out = []
    for row in DeltaTable.forPath(spark, path).history().select("version", "userMetadata").collect():
        progress = _progress(row["userMetadata"])
        if progress is not None and progress.cut is not None:
            out.append((int(row["version"]), progress.cut))
    return sorted(out)


def version_at_cut(commits: Sequence[tuple[int, int]], cut: int) -> int | None:
    """The newest version whose recorded cut is at or below ``cut`` (``None``: none is)."""
    eligible = [version for version, at in commits if at <= cut]
    return max(eligible) if eligible else None


def _metadata(value: Mapping[str, Any]) -> str:
    return json.dumps(value, sort_keys=True)
