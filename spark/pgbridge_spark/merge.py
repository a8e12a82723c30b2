"""How a table's changes merge into its mirror: pure DataFrame plans, no I/O (``mirror`` writes).

A keyed table keeps, per key, the entry at the highest ``(commit_lsn, total_order)``; a table
without key columns is a multiset of rows. Both honour truncates, columns dropped and added again
(``_reset_dropped``) and, for keyed tables, TOAST columns an update left unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

COMMIT_LSN_COLUMN: Final = "_pgbridge_commit_lsn"
TOTAL_ORDER_COLUMN: Final = "_pgbridge_total_order"


def _fields_of(struct: str, row_type: StructType) -> list[Column]:
    return [F.col(struct).getField(f.name).alias(f.name) for f in row_type.fields]


Position = tuple[int, int]


def _reset_dropped(entries: DataFrame, row_type: StructType, resets: Mapping[str, Position]) -> DataFrame:
    """Null column ``c`` in entries positioned before ``resets[c]``: a writer schema without ``c``
    was in use there, so ``c`` was dropped after them (and maybe added again since)."""
    if not resets:
        return entries
    columns = []
    for f in row_type.fields:
        if f.name in resets:
            lsn, order = resets[f.name]
            before = (F.col("commit_lsn") < lsn) | ((F.col("commit_lsn") == lsn) & (F.col("total_order") < order))
            columns.append(F.when(before, F.lit(None).cast(f.dataType)).otherwise(F.col(f"`{f.name}`")).alias(f.name))
        else:
            columns.append(F.col(f"`{f.name}`"))
    others = [F.col(c) for c in entries.columns if c not in {f.name for f in row_type.fields}]
    return entries.select(*columns, *others)


def merge_keyed(existing: DataFrame, changes: DataFrame, row_type: StructType, key_fields: Sequence[str],
                truncate: tuple[int, int] | None, with_toast: bool,
                resets: Mapping[str, Position] | None = None) -> DataFrame:
    """The table after ``changes``: per key the entry at the highest position wins, a delete
    removes the key, a truncate drops everything positioned before it.

    An update that changes the key (its ``before`` has the old key) also deletes the old key. With
    ``with_toast``, a column that an update left as unchanged TOAST keeps its previous value.
    """
    names = [f.name for f in row_type.fields]
    meta = ["commit_lsn", "total_order", "_deleted", "_rank", "_toast"]
    no_toast = F.array().cast("array<string>")
    upserts = changes.where("op IN ('c', 'r', 'u')").select(
        *_fields_of("after", row_type), "commit_lsn", "total_order", F.lit(False).alias("_deleted"),
        F.lit(1).alias("_rank"), F.col("unchanged_toast_columns").alias("_toast"))
    same_key = " AND ".join(f"before.`{k}` <=> after.`{k}`" for k in key_fields) or "true"
    deletes = changes.where(f"op = 'd' OR (op = 'u' AND before IS NOT NULL AND NOT ({same_key}))").select(
        *_fields_of("before", row_type), "commit_lsn", "total_order", F.lit(True).alias("_deleted"),
        F.lit(1).alias("_rank"), no_toast.alias("_toast"))
    current = existing.select(*[F.col(f"`{n}`") for n in names], F.col(COMMIT_LSN_COLUMN).alias("commit_lsn"),
                              F.col(TOTAL_ORDER_COLUMN).alias("total_order"), F.lit(False).alias("_deleted"),
                              F.lit(0).alias("_rank"), no_toast.alias("_toast"))
    entries = _reset_dropped(current.unionByName(upserts), row_type, resets or {}).unionByName(deletes)
    if truncate is not None:
        lsn, order = truncate
        entries = entries.where((F.col("commit_lsn") > lsn) | ((F.col("commit_lsn") == lsn)
                                                               & (F.col("total_order") >= order)))
    keys = [F.col(f"`{k}`") for k in key_fields]
    if with_toast:
        history = (Window.partitionBy(*keys).orderBy("commit_lsn", "total_order", "_rank")
                   .rowsBetween(Window.unboundedPreceding, Window.currentRow))
        filled = []
        for n in names:
            sent = F.when(~F.array_contains("_toast", n), F.struct(F.col(f"`{n}`").alias("v")))
            filled.append(F.last(sent, ignorenulls=True).over(history).getField("v").alias(n))
        entries = entries.select(*filled, *meta)
    latest = Window.partitionBy(*keys).orderBy(F.desc("commit_lsn"), F.desc("total_order"), F.desc("_rank"))
    return (entries.withColumn("_n", F.row_number().over(latest)).where("_n = 1 AND NOT _deleted")
            .select(*[F.col(f"`{n}`") for n in names], F.col("commit_lsn").alias(COMMIT_LSN_COLUMN),
                    F.col("total_order").alias(TOTAL_ORDER_COLUMN)))


def merge_keyless(existing: DataFrame, changes: DataFrame, row_type: StructType,
                  truncate: tuple[int, int] | None, resets: Mapping[str, Position] | None = None) -> DataFrame:
    """A table without key columns (REPLICA IDENTITY FULL) as a multiset of rows: inserts add a
    row, deletes remove one equal to ``before``, updates do both. Counting commutes, so only the
    truncate needs positions."""
    names = [f.name for f in row_type.fields]
    adds = changes.where("op IN ('c', 'r', 'u')").select(*_fields_of("after", row_type), "commit_lsn",
                                                         "total_order", F.lit(1).alias("_n"))
    removes = changes.where("op IN ('u', 'd') AND before IS NOT NULL").select(
        *_fields_of("before", row_type), "commit_lsn", "total_order", F.lit(-1).alias("_n"))
    current = existing.select(*[F.col(f"`{n}`") for n in names], F.col(COMMIT_LSN_COLUMN).alias("commit_lsn"),
                              F.col(TOTAL_ORDER_COLUMN).alias("total_order"), F.lit(1).alias("_n"))
    entries = _reset_dropped(current.unionByName(adds), row_type, resets or {}).unionByName(
        _reset_dropped(removes, row_type, resets or {}))
    if truncate is not None:
        lsn, order = truncate
        entries = entries.where((F.col("commit_lsn") > lsn) | ((F.col("commit_lsn") == lsn)
                                                               & (F.col("total_order") >= order)))
    grouped = entries.groupBy(*[F.col(f"`{n}`") for n in names]).agg(
        F.sum("_n").alias("_n"), F.max(F.struct("commit_lsn", "total_order")).alias("_p"))
    return (grouped.where("_n > 0").withColumn("_copy", F.explode(F.sequence(F.lit(1), F.col("_n").cast("int"))))
            .select(*[F.col(f"`{n}`") for n in names], F.col("_p.commit_lsn").alias(COMMIT_LSN_COLUMN),
                    F.col("_p.total_order").alias(TOTAL_ORDER_COLUMN)))
