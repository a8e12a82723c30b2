"""The mirror's table formats, one interface: Delta Lake (``delta_tables``, the default) and Apache
Iceberg (``iceberg_tables``, ``--table-format iceberg``).

The job (``mirror``), the reader (``reading``) and the benchmarks speak only this interface; each
format module implements it with its own commit protocol. What every format must give:

- **one commit per table and micro-batch** (an append, or one ``MERGE`` of a ``merge.MergePlan``);
- **the job's progress inside that commit** (``Commit.metadata``, ``progress.TableProgress``),
  read back by ``last_progress`` on start: a micro-batch replayed after a crash is skipped because
  its commit is found there (Delta's ``txnAppId``/``txnVersion`` add a second guard);
- **time travel** to a commit (``versions_with_cut`` then ``read(..., version=...)``) for readers of a
  consistent cut;
- nothing on the driver's disk: every path is a Hadoop filesystem URI or a local path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from pgbridge_spark.config import TABLE_FORMATS
from pgbridge_spark.evolution import SchemaPlan
from pgbridge_spark.merge import MergePlan
from pgbridge_spark.progress import TableProgress


@dataclass(frozen=True)
class Commit:
    """What one table's commit of a micro-batch carries: the job (named by its checkpoint), the
    batch id and the job's progress on the table (``TableProgress.to_metadata()``)."""

    app_id: str
    version: int
    metadata: str


class TableFormat(Protocol):
    """A table format module (``delta_tables``, ``iceberg_tables``)."""

    def require(self, spark: SparkSession) -> None: ...
    def is_table(self, spark: SparkSession, path: str) -> bool: ...
    def last_progress(self, spark: SparkSession, path: str) -> tuple[TableProgress, int] | None: ...
    def create_table(self, spark: SparkSession, path: str, schema: StructType) -> None: ...
    def stored_schema(self, spark: SparkSession, path: str) -> StructType: ...
    def evolve(self, spark: SparkSession, path: str, plan: SchemaPlan, stored: StructType) -> None: ...
    def has_rows(self, spark: SparkSession, path: str) -> bool: ...
    def read(self, spark: SparkSession, path: str, version: int | None = None) -> DataFrame: ...
    def append(self, frame: DataFrame, path: str, commit: Commit, *, merge_schema: bool = False) -> None: ...
    def merge(self, spark: SparkSession, path: str, source: DataFrame, plan: MergePlan, commit: Commit) -> None: ...
    def compact(self, spark: SparkSession, path: str, metadata: str) -> None: ...
    def vacuum(self, spark: SparkSession, path: str, retention_hours: float) -> None: ...
    def file_count(self, spark: SparkSession, path: str) -> int | None: ...
    def versions_with_cut(self, spark: SparkSession, path: str) -> list[tuple[int, int]]: ...


def table_uri(output: str, name: str) -> str:
    """Where the mirror of ``name`` ("schema.table") lives under ``--output``, in every format."""
    return f"{output.rstrip('/')}/{name}"


def table_format(name: str) -> TableFormat:
    """The module of format ``name`` (one of ``config.TABLE_FORMATS``)."""
    if name == "iceberg":
        from pgbridge_spark import iceberg_tables

        return iceberg_tables
    if name == "delta":
        from pgbridge_spark import delta_tables

        return delta_tables
    raise ValueError(f"unknown table format {name!r}: one of {', '.join(TABLE_FORMATS)}")


def detect(spark: SparkSession, path: str) -> TableFormat | None:
    """The format of the table at ``path`` (``None``: no table there yet)."""
    for name in TABLE_FORMATS:
        tables = table_format(name)
        if tables.is_table(spark, path):
            return tables
    return None


def version_at_cut(commits: Sequence[tuple[int, int]], cut: int) -> int | None:
    """The newest of ``commits`` (``(version, cut)`` in commit order, ``versions_with_cut``) whose
    recorded cut is at or below ``cut`` (``None``: none is). Versions are Delta's version numbers
    or Iceberg's snapshot ids (not ordered by value): the order of the list is what counts."""
    eligible = [version for version, at in commits if at <= cut]
    return eligible[-1] if eligible else None
