"""The mirror's Apache Iceberg tables (``--table-format iceberg``): create, evolve, ``MERGE``,
append, read progress, upkeep. The same interface as ``delta_tables`` (``formats.TableFormat``).

Where the tables live. Each table is a path-based Iceberg table at ``{--output}/{schema.table}``,
the path a Delta mirror uses: the job registers a Hadoop catalog whose warehouse is ``--output``
(``spark.sql.catalog.pgbridge_<hash>``, set on the session at first use, no catalog service), so
the table's SQL name is ``pgbridge_<hash>.`schema.table``` and its metadata and data files sit under
the path on whatever Hadoop file system holds it. Any engine reads it by path
(``spark.read.format("iceberg").load(path)``) or registers it in its own catalog. The catalog's
table cache is off: the job's sibling sessions (``--parallel-tables``) each hold a catalog, and a
cached table would hide another session's commit.

Exactly once. Each micro-batch's write into a table is one Iceberg snapshot whose summary holds the
job's progress (``pgbridge.progress``: ``progress.TableProgress``, the batch id included), read
back from the table's current snapshot and its ancestors on start: a micro-batch replayed after a
crash finds its own commit there and is skipped. A ``MERGE INTO`` statement has no write options,
so the property is attached through Iceberg's ``CommitMetadata.withCommitProperties``, which runs
the statement on the same JVM thread (a py4j callback into Python that issues it there).

The ``MERGE`` is the same ``merge.MergePlan`` Delta runs, as one SQL statement
(``merge.merge_statement``); tables are format version 2 with merge-on-read deletes, updates and
merges, so a ``MERGE`` writes position-delete files and new rows instead of rewriting every data
file it touches (Delta's deletion vectors, in Iceberg).
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, StructType

from pgbridge_spark.evolution import SchemaPlan, apply_schema_plan, cast_column, sql_type
from pgbridge_spark.formats import Commit
from pgbridge_spark.merge import MergePlan, merge_statement, quoted, sql_string
from pgbridge_spark.packages import ICEBERG_ARTIFACTS, ICEBERG_VERSION, missing_message
from pgbridge_spark.progress import TableProgress
from pgbridge_spark.source import loadable

log = logging.getLogger("pgbridge_spark.iceberg_tables")

CATALOG_CLASS: Final = "org.apache.iceberg.spark.SparkCatalog"
PROGRESS: Final = "pgbridge.progress"  # the snapshot summary property holding the job's progress
ANCESTORS_DEPTH: Final = 1000  # snapshots walked back from the current one for the progress
# New mirror tables: row-level changes as position deletes (merge-on-read), not file rewrites.
TABLE_PROPERTIES: Final[Mapping[str, str]] = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}
# A changelog table (appends only) takes new columns with its rows (merge-schema). Not for a mirror
# table: Spark leaves a MERGE INTO a table that accepts any schema unresolved.
APPEND_ONLY_PROPERTIES: Final[Mapping[str, str]] = {**TABLE_PROPERTIES, "write.spark.accept-any-schema": "true"}


class MissingIceberg(RuntimeError):
    """Apache Iceberg's Spark runtime is not on the session's class path."""


def require(spark: SparkSession) -> None:
    """One line naming the fix when the Iceberg runtime jar is missing."""
    if not loadable(spark, CATALOG_CLASS):
        raise MissingIceberg(missing_message(list(ICEBERG_ARTIFACTS),
                                             f"Apache Iceberg {ICEBERG_VERSION} is not on Spark's class path"))


# --- names -----------------------------------------------------------------------------------------


def split_path(path: str) -> tuple[str, str]:
    """``(warehouse, table name)`` of a table path ``{output}/{schema.table}``."""
    warehouse, _, name = path.rstrip("/").rpartition("/")
    if not warehouse or not name:
        raise ValueError(f"{path!r} is not a mirror table path ({{output}}/{{schema.table}})")
    return warehouse, name


def catalog_name(warehouse: str) -> str:
    """The session catalog name of the Hadoop catalog rooted at ``warehouse``."""
    return "pgbridge_" + hashlib.sha256(warehouse.encode()).hexdigest()[:12]


def catalog_settings(warehouse: str) -> dict[str, str]:
    prefix = f"spark.sql.catalog.{catalog_name(warehouse)}"
    return {prefix: CATALOG_CLASS, f"{prefix}.type": "hadoop", f"{prefix}.warehouse": warehouse,
            f"{prefix}.cache-enabled": "false"}


def identifier(spark: SparkSession, path: str) -> str:
    """The table's SQL name, its catalog registered in ``spark`` first (runtime settings: catalogs
    load on first use)."""
    warehouse, name = split_path(path)
    for key, value in catalog_settings(warehouse).items():
        if spark.conf.get(key, None) != value:
            spark.conf.set(key, value)
    return f"{catalog_name(warehouse)}.{quoted(name)}"


def _table(spark: SparkSession, path: str) -> Any:
    """The table's ``org.apache.iceberg.Table`` (no Spark job)."""
    jvm = spark._jvm
    assert jvm is not None
    return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, identifier(spark, path))


# --- the table -------------------------------------------------------------------------------------


def is_table(spark: SparkSession, path: str) -> bool:
    if not loadable(spark, CATALOG_CLASS):
        return False
    return bool(spark.catalog.tableExists(identifier(spark, path)))


def create_table(spark: SparkSession, path: str, schema: StructType,
                 properties: Mapping[str, str] = TABLE_PROPERTIES) -> None:
    """An empty Iceberg table at ``path`` (kept if one is already there)."""
    columns = ", ".join(f"{quoted(f.name)} {sql_type(spark, f.dataType)}" for f in schema.fields)
    settings = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in properties.items())
    spark.sql(f"CREATE TABLE IF NOT EXISTS {identifier(spark, path)} ({columns}) USING iceberg "
              f"TBLPROPERTIES ({settings})")


def stored_schema(spark: SparkSession, path: str) -> StructType:
    return spark.table(identifier(spark, path)).schema


def read(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    """The table, or its state at snapshot ``version`` (time travel)."""
    reader = spark.read if version is None else spark.read.option("versionAsOf", str(version))
    return reader.table(identifier(spark, path))


def has_rows(spark: SparkSession, path: str) -> bool:
    return bool(read(spark, path).limit(1).count())


def evolve(spark: SparkSession, path: str, plan: SchemaPlan, stored: StructType) -> None:
    """Apply ``plan``: metadata-only commits (Iceberg tracks columns by id), except a retype Iceberg
    cannot widen in place, which replaces the table with the column ``try_cast`` in one commit that
    carries the job's last progress (its snapshot has no parent to find it in)."""
    table = identifier(spark, path)

    def rewrite(name: str, data_type: DataType) -> None:
        found = last_progress(spark, path)
        summary = {PROGRESS: found[0].to_metadata()} if found is not None else {}
        writer = cast_column(spark.table(table), name, data_type).writeTo(table).using("iceberg")
        for key, value in {**TABLE_PROPERTIES, **_table_properties(spark, path)}.items():
            writer = writer.tableProperty(key, value)
        _with_commit_properties(spark, summary, writer.createOrReplace)

    apply_schema_plan(spark, table, plan, stored, rewrite)


def _table_properties(spark: SparkSession, path: str) -> dict[str, str]:
    properties = _table(spark, path).properties()
    return {str(k): str(properties.get(k)) for k in properties.keySet()}


# --- commits ---------------------------------------------------------------------------------------


class _Callable:
    """A ``java.util.concurrent.Callable`` implemented in Python (py4j callback): runs ``action``
    on the JVM thread that calls it, and keeps its exception to re-raise it as it was."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.action = action
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            self.action()
        except BaseException as exc:
            self.error = exc
        return None

    class Java:
        implements: Final = ["java.util.concurrent.Callable"]


def _with_commit_properties(spark: SparkSession, properties: Mapping[str, str], action: Callable[[], object]) -> None:
    """Run ``action`` so that every Iceberg snapshot it commits carries ``properties`` in its summary."""
    if not properties:
        action()
        return
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    assert gateway is not None
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    jvm = spark._jvm
    assert jvm is not None
    values = jvm.java.util.HashMap()
    for key, value in properties.items():
        values.put(key, value)
    call = _Callable(action)
    jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
        values, call, jvm.java.lang.RuntimeException().getClass())
    if call.error is not None:
        raise call.error


def merge(spark: SparkSession, path: str, source: DataFrame, plan: MergePlan, commit: Commit) -> None:
    """One ``MERGE INTO`` of ``source`` (alias ``s``) into the table (alias ``t``): one snapshot
    carrying ``commit.metadata``. The source is a global temporary view, visible to the sibling
    session that may run the statement."""
    view = f"pgbridge_source_{uuid.uuid4().hex}"
    source.createOrReplaceGlobalTempView(view)
    global_db = spark.conf.get("spark.sql.globalTempDatabase", "global_temp") or "global_temp"
    statement = merge_statement(identifier(spark, path), f"{quoted(global_db)}.{quoted(view)}", plan)
    try:
        _with_commit_properties(spark, {PROGRESS: commit.metadata}, lambda: spark.sql(statement))
    finally:
        spark.catalog.dropGlobalTempView(view)


def append(frame: DataFrame, path: str, commit: Commit, *, merge_schema: bool = False) -> None:
    """One append carrying ``commit.metadata`` (the table created first if missing); with
    ``merge_schema`` new columns of ``frame`` are added to the table."""
    spark = frame.sparkSession
    if not is_table(spark, path):
        create_table(spark, path, frame.schema, APPEND_ONLY_PROPERTIES if merge_schema else TABLE_PROPERTIES)
    writer = frame.writeTo(identifier(spark, path)).option(f"snapshot-property.{PROGRESS}", commit.metadata)
    if merge_schema:
        writer = writer.option("merge-schema", "true")
    writer.append()


# --- progress and history --------------------------------------------------------------------------


def _ancestors(spark: SparkSession, path: str) -> Iterator[Any]:
    """The current snapshot and its ancestors, newest first (at most ``ANCESTORS_DEPTH``)."""
    table = _table(spark, path)
    snapshot = table.currentSnapshot()
    for _ in range(ANCESTORS_DEPTH):
        if snapshot is None:
            return
        yield snapshot
        parent = snapshot.parentId()
        snapshot = table.snapshot(parent) if parent is not None else None


def last_progress(spark: SparkSession, path: str) -> tuple[TableProgress, int] | None:
    """The job's progress in the newest snapshot of the table's history that has one, and that
    snapshot's id (``None``: no pgbridge commit yet)."""
    for snapshot in _ancestors(spark, path):
        progress = TableProgress.found_in(snapshot.summary().get(PROGRESS))
        if progress is not None:
            return progress, int(snapshot.snapshotId())
    return None


def versions_with_cut(spark: SparkSession, path: str) -> list[tuple[int, int]]:
    """``(snapshot id, cut)`` of every snapshot of the table's history that records a consistent
    cut, oldest first."""
    out = []
    for snapshot in _ancestors(spark, path):
        progress = TableProgress.found_in(snapshot.summary().get(PROGRESS))
        if progress is not None and progress.cut is not None:
            out.append((int(snapshot.snapshotId()), progress.cut))
    return out[::-1]


# --- upkeep ----------------------------------------------------------------------------------------


def file_count(spark: SparkSession, path: str) -> int | None:
    """Data and delete files of the current snapshot, from its summary (no Spark job)."""
    snapshot = _table(spark, path).currentSnapshot()
    if snapshot is None:
        return 0
    summary = snapshot.summary()
    counts = [summary.get(key) for key in ("total-data-files", "total-delete-files")]
    return sum(int(c) for c in counts) if all(c is not None for c in counts) else None


def compact(spark: SparkSession, path: str, metadata: str) -> None:
    """Bin-pack small files and apply the position deletes to the files they point at (Iceberg's
    ``rewrite_data_files``); the snapshot keeps the job's progress."""
    jvm = spark._jvm
    assert jvm is not None
    action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession).rewriteDataFiles(
        _table(spark, path))
    action.option("delete-file-threshold", "1").snapshotProperty(PROGRESS, metadata).execute()


def vacuum(spark: SparkSession, path: str, retention_hours: float) -> None:
    """Forget snapshots older than the retention (always keeping the current one), then delete
    the files no snapshot refers to any more."""
    jvm = spark._jvm
    assert jvm is not None
    actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
    older_than = int((time.time() - retention_hours * 3600) * 1000)
    actions.expireSnapshots(_table(spark, path)).expireOlderThan(older_than).retainLast(1).execute()
    actions.deleteOrphanFiles(_table(spark, path)).olderThan(older_than).execute()
