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
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, StructType

from pgbridge_spark.evolution import SchemaPlan, apply_schema_plan, cast_column
from pgbridge_spark.formats import Commit
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
# A Delta log's commit (00000000000000000000.json) or checkpoint (...checkpoint[.part].parquet, v2 ones too).
_COMMIT_OR_CHECKPOINT: Final = re.compile(r"\d{20}\.(json|checkpoint(\..+)?\.parquet)")
# New mirror tables: renames and drops in place (column mapping), MERGE without rewriting whole
# files (deletion vectors), int → long and wider decimals in place (type widening).
TABLE_PROPERTIES: Final[Mapping[str, str]] = {
    "delta.columnMapping.mode": "name",
    "delta.enableDeletionVectors": "true",
    "delta.enableTypeWidening": "true",
}


class MissingDelta(RuntimeError):
    """Delta Lake is not in the Spark session (jar or SQL extension missing)."""


def require(spark: SparkSession) -> None:
    """One line naming the fix when delta-spark's jar or its session settings are missing."""
    if not loadable(spark, DELTA_CLASS):
        delta = [a for a in ARTIFACTS if a.group == "io.delta"]
        raise MissingDelta(missing_message(delta, f"Delta Lake {DELTA_VERSION} is not on Spark's class path"))
    extensions = spark.conf.get("spark.sql.extensions", None) or ""
    if DELTA_SESSION_CONF["spark.sql.extensions"] not in extensions:
        settings = " ".join(f"--conf {k}={v}" for k, v in DELTA_SESSION_CONF.items())
        raise MissingDelta(f"Delta Lake's SQL extension is not enabled in this Spark session: start it with {settings}")


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
    if len(history) == HISTORY_DEPTH and not any(TableProgress.found_in(r["userMetadata"]) for r in history):
        history = DeltaTable.forPath(spark, path).history().select("version", "userMetadata").collect()
    for row in sorted(history, key=lambda r: -int(r["version"])):
        progress = TableProgress.found_in(row["userMetadata"])
        if progress is not None:
            return progress, int(row["version"])
    return None


def create_table(spark: SparkSession, path: str, schema: StructType,
                 properties: Mapping[str, str] = TABLE_PROPERTIES) -> None:
    """An empty Delta table at ``path`` (kept if one is already there)."""
    _drop_log_without_commit(spark, path)
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    for key, value in properties.items():
        builder = builder.property(key, value)
    builder.execute()


def _drop_log_without_commit(spark: SparkSession, path: str) -> None:
    """Remove ``path/_delta_log`` when it holds no commit and no checkpoint.

    A driver killed while it created the table can leave the folder without its first commit (the
    cluster kill test saw it on HDFS), and Delta then refuses ``createIfNotExists`` there with
    DELTA_TABLE_NOT_FOUND on every later run. Nothing was ever committed to such a log, so no data
    or progress is lost by removing it; the job is the table's only writer."""
    session: Any = spark  # py4j's gateway: Hadoop's FileSystem (local, hdfs://, s3a:// alike)
    log_path = session._jvm.org.apache.hadoop.fs.Path(f"{path.rstrip('/')}/_delta_log")
    fs = log_path.getFileSystem(session._jsc.hadoopConfiguration())
    if not fs.exists(log_path):
        return
    names = [status.getPath().getName() for status in fs.listStatus(log_path)]
    if any(_COMMIT_OR_CHECKPOINT.fullmatch(name) for name in names):
        return
    log.warning("removing a Delta log without a commit (a creation interrupted earlier)",
                extra={"path": path, "files": names})
    fs.delete(log_path, True)


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


def evolve(spark: SparkSession, path: str, plan: SchemaPlan, stored: StructType) -> None:
    """Apply ``plan`` (``evolution.plan_schema``): metadata-only commits, except a retype Delta
    cannot widen in place, which rewrites the table with the column ``try_cast``."""
    def rewrite(name: str, data_type: DataType) -> None:
        cast_column(read(spark, path), name, data_type).write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)

    apply_schema_plan(spark, _sql_path(path), plan, stored, rewrite)


def merge(spark: SparkSession, path: str, source: DataFrame, plan: MergePlan, commit: Commit) -> None:
    """One ``MERGE`` of ``source`` (alias ``s``) into the table (alias ``t``), one idempotent commit
    carrying ``commit``."""
    with commit_options(spark, commit.app_id, commit.version, commit.metadata):
        _merge(spark, path, source, plan)


def _merge(spark: SparkSession, path: str, source: DataFrame, plan: MergePlan) -> None:
    builder = DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), plan.condition)
    if plan.delete_when is not None:
        builder = builder.whenMatchedDelete(plan.delete_when)
    if plan.update_when is not None:
        builder = builder.whenMatchedUpdate(plan.update_when, set=dict(plan.update))
    builder = builder.whenNotMatchedInsert(plan.insert_when, values=dict(plan.insert))
    if plan.truncate_when is not None:
        if plan.truncate_update is None:
            builder = builder.whenNotMatchedBySourceDelete(plan.truncate_when)
        else:
            builder = builder.whenNotMatchedBySourceUpdate(plan.truncate_when, set=dict(plan.truncate_update))
    builder.execute()


def append(frame: DataFrame, path: str, commit: Commit, *, merge_schema: bool = False,
           overwrite: bool = False) -> None:
    """One idempotent write (``txnAppId``/``txnVersion``) carrying ``commit.metadata``; with
    ``merge_schema`` new columns of ``frame`` are added to the table."""
    writer = (frame.write.format("delta").mode("overwrite" if overwrite else "append")
              .option("txnAppId", commit.app_id).option("txnVersion", str(commit.version))
              .option("userMetadata", commit.metadata))
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    writer.save(path)


def read(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    """The table, or its state at ``version`` (time travel)."""
    reader = spark.read.format("delta")
    return (reader if version is None else reader.option("versionAsOf", version)).load(path)


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
    return bool(read(spark, path).limit(1).count())


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
    """``(version, cut)`` of every commit of the table that records a consistent cut, oldest first."""
    out = []
    for row in DeltaTable.forPath(spark, path).history().select("version", "userMetadata").collect():
        progress = TableProgress.found_in(row["userMetadata"])
        if progress is not None and progress.cut is not None:
            out.append((int(row["version"]), progress.cut))
    return sorted(out)


def _metadata(value: Mapping[str, Any]) -> str:
    return json.dumps(value, sort_keys=True)
