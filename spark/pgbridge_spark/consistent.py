"""The reads and writes of consistent mode (``--consistent``): the cut a micro-batch reaches, and
the Delta table ``{output}/_pgbridge/pending`` where the records past it wait for a later batch
(a Delta table whatever ``--table-format`` the mirror's tables have: it is the job's own state).
The rule itself (which transactions are complete) is pure: ``progress.consistent_cut``.

The pending table's commit is the last of a micro-batch: its ``userMetadata`` records the cut
reached (``read_consistent`` reads every table at it) and how many records it holds, so the next
batch reads it only when it holds some, and a batch that ends between transactions, after one that
left nothing waiting, commits there without data (``delta_tables.mark``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from pgbridge_spark import delta_tables
from pgbridge_spark.decode import decode_boundaries
from pgbridge_spark.formats import Commit, table_uri
from pgbridge_spark.progress import TableProgress, TransactionEnd, consistent_cut, past_cut

CONTROL_DIR: Final = "_pgbridge"
PENDING: Final = f"{CONTROL_DIR}/pending"
COORDINATES: Final = ["topic", "partition", "offset"]


@dataclass(frozen=True)
class Pending:
    """What the pending table recorded with the last micro-batch that completed."""

    cut: int = 0
    done: bool = False  # the micro-batch at hand completed before (a replay)
    held: int | None = 0  # records it holds past the cut (None: unknown, a job before the count)
    exists: bool = False


@dataclass(frozen=True)
class Cut:
    lsn: int  # every transaction with a commit LSN at or below it is applied
    boundaries: list[tuple[int, int, int]]  # (partition, offset, commit_lsn) of every boundary record read
    past: int  # records that wait past it (``progress.past_cut``)


def union(frames: Sequence[DataFrame]) -> DataFrame:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def read_pending(spark: SparkSession, output: str, app_id: str, batch_id: int) -> Pending:
    path = table_uri(output, PENDING)
    if not delta_tables.is_table(spark, path):
        return Pending()
    found = delta_tables.last_progress(spark, path)
    if found is None:
        return Pending(held=None, exists=True)
    progress = found[0]
    return Pending(cut=progress.cut or 0, done=progress.applied(app_id, batch_id), held=progress.pending, exists=True)


def with_pending(spark: SparkSession, raw: DataFrame, output: str, pending: Pending) -> DataFrame:
    """The micro-batch's records and those waiting in the pending table (unless it holds none)."""
    if pending.held == 0:
        return raw
    held = delta_tables.read(spark, table_uri(output, PENDING))
    return raw.unionByName(held).dropDuplicates(COORDINATES)


def find_cut(raw: DataFrame, changes: Sequence[DataFrame], texts: Mapping[str, str], transactions_topic: str,
             tables: set[str] | None, before: int) -> Cut:
    """The cut through the batch's records (``raw``), given each table's decoded ``changes``; only
    ``tables`` ("schema.table", ``None``: all) count."""
    records = raw.where(F.col("topic") == transactions_topic).select("partition", "offset", "value").collect()
    decoded = list(decode_boundaries(texts, [r["value"] for r in records]))
    ends = [TransactionEnd(b["commit_lsn"], {c["data_collection"]: c["event_count"]
                                             for c in b["data_collections"] or []})
            for b in decoded if b["status"] == "END"]
    counts: dict[tuple[int, str], int] = {}
    if changes:
        per_table = [c.where("transaction IS NOT NULL").select("commit_lsn", "source.schema", "source.table")
                     for c in changes]
        for row in union(per_table).groupBy("commit_lsn", "schema", "table").count().collect():
            counts[(row["commit_lsn"], f"{row['schema']}.{row['table']}")] = row["count"]
    cut = consistent_cut(before, ends, counts, tables)
    return Cut(cut, [(r["partition"], r["offset"], b["commit_lsn"]) for r, b in zip(records, decoded, strict=True)],
               past_cut(cut, counts, (b["commit_lsn"] for b in decoded)))


def keep_pending(spark: SparkSession, raw: DataFrame, changes: Sequence[DataFrame], cut: Cut, before: Pending, *,
                 output: str, app_id: str, batch_id: int, transactions_topic: str) -> None:
    """The pending table's commit of the micro-batch: the records past the cut (raw, so a later
    schema still applies), or, with none past it and none held before, a commit without data."""
    path = table_uri(output, PENDING)
    progress = TableProgress(app=app_id, batch=batch_id, cut=cut.lsn, pending=cut.past)
    if cut.past == 0 and before.held == 0 and before.exists:
        delta_tables.mark(spark, path, app_id, batch_id, progress.to_metadata(), {"pgbridge.cut": str(cut.lsn)})
        return
    coordinates = StructType([StructField("topic", raw.schema["topic"].dataType, False),
                              StructField("partition", IntegerType(), False),
                              StructField("offset", LongType(), False)])
    keep = [c.where(f"transaction IS NOT NULL AND commit_lsn > {cut.lsn}").select(*COORDINATES) for c in changes]
    keep.append(spark.createDataFrame(
        [(transactions_topic, p, o) for p, o, lsn in cut.boundaries if lsn > cut.lsn], coordinates))
    kept = raw.join(union(keep), COORDINATES, "left_semi")
    delta_tables.append(kept.select("key", "value", *COORDINATES), path, Commit(app_id, batch_id, progress.to_metadata()),
                        overwrite=True)
