"""How a table's changes merge into its mirror: pure DataFrame plans, no I/O (``mirror`` writes).

A keyed table keeps, per key, the entry at the highest ``(commit_lsn, total_order)``; a table
without key columns is a multiset of rows. Both honour truncates, columns dropped and added again
(``_reset_dropped``) and, for keyed tables, TOAST columns an update left unchanged.

Values a typed column cannot hold (the envelope's ``unrepresentable`` map: ``infinity`` dates,
``NaN`` numerics, arrays of several dimensions...) are null in their column and kept in the
mirror's map column ``_pgbridge_unrepresentable`` (column name → exact Postgres text). Inside a
merge each column's text travels as a hidden companion column beside it, so it follows the
column's value through every rule above (a map cannot be grouped or carried per column).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StringType, StructType

COMMIT_LSN_COLUMN: Final = "_pgbridge_commit_lsn"
TOTAL_ORDER_COLUMN: Final = "_pgbridge_total_order"
UNREPRESENTABLE_COLUMN: Final = "_pgbridge_unrepresentable"
UNREPRESENTABLE_MIRROR_TYPE: Final = MapType(StringType(), StringType(), True)


def _text(index: int) -> str:
    """The hidden companion column holding the unrepresentable text of the row type's field ``index``."""
    return f"_pgbridge_text_{index}"


def _fields_of(image: str, row_type: StructType) -> list[Column]:
    """The columns of a change's ``before`` / ``after``, each followed by its text from the envelope's
    ``unrepresentable`` map (key ``{image}.{column}``)."""
    out = []
    for i, f in enumerate(row_type.fields):
        out.append(F.col(image).getField(f.name).alias(f.name))
        out.append(F.col("unrepresentable").getItem(f"{image}.{f.name}").alias(_text(i)))
    return out


def _stored_fields(existing: DataFrame, row_type: StructType) -> list[Column]:
    """The columns of the stored mirror, each followed by its text from ``_pgbridge_unrepresentable``
    (absent from mirrors written before it: no texts)."""
    out = []
    for i, f in enumerate(row_type.fields):
        out.append(F.col(f"`{f.name}`"))
        text = (F.col(UNREPRESENTABLE_COLUMN).getItem(f.name) if UNREPRESENTABLE_COLUMN in existing.columns
                else F.lit(None).cast("string"))
        out.append(text.alias(_text(i)))
    return out


def _with_texts(row_type: StructType) -> list[str]:
    return [name for i, f in enumerate(row_type.fields) for name in (f.name, _text(i))]


def _collapse_texts(row_type: StructType) -> Column:
    """The companions back into ``_pgbridge_unrepresentable`` (null when no column needs one)."""
    if not row_type.fields:
        return F.lit(None).cast(UNREPRESENTABLE_MIRROR_TYPE).alias(UNREPRESENTABLE_COLUMN)
    entries = F.array(*[F.struct(F.lit(f.name).alias("key"), F.col(_text(i)).alias("value"))
                        for i, f in enumerate(row_type.fields)])
    texts = F.map_from_entries(F.filter(entries, lambda e: e.getField("value").isNotNull()))
    return F.when(F.size(texts) > 0, texts).cast(UNREPRESENTABLE_MIRROR_TYPE).alias(UNREPRESENTABLE_COLUMN)


def _output(row_type: StructType, lsn: str, order: str) -> list[Column]:
    return [*[F.col(f"`{f.name}`") for f in row_type.fields], _collapse_texts(row_type),
            F.col(lsn).alias(COMMIT_LSN_COLUMN), F.col(order).alias(TOTAL_ORDER_COLUMN)]


Position = tuple[int, int]


def _reset_dropped(entries: DataFrame, row_type: StructType, resets: Mapping[str, Position]) -> DataFrame:
    """Null column ``c`` in entries positioned before ``resets[c]``: a writer schema without ``c``
    was in use there, so ``c`` was dropped after them (and maybe added again since)."""
    if not resets:
        return entries
    columns = {c: F.col(f"`{c}`") for c in entries.columns}
    for i, f in enumerate(row_type.fields):
        if f.name in resets:
            lsn, order = resets[f.name]
            before = (F.col("commit_lsn") < lsn) | ((F.col("commit_lsn") == lsn) & (F.col("total_order") < order))
            columns[f.name] = F.when(before, F.lit(None).cast(f.dataType)).otherwise(columns[f.name]).alias(f.name)
            columns[_text(i)] = F.when(before, F.lit(None).cast("string")).otherwise(
                columns[_text(i)]).alias(_text(i))
    return entries.select(*columns.values())


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
    texts = [_text(i) for i in range(len(names))]
    no_toast = F.array().cast("array<string>")
    upserts = changes.where("op IN ('c', 'r', 'u')").select(
        *_fields_of("after", row_type), "commit_lsn", "total_order", F.lit(False).alias("_deleted"),
        F.lit(1).alias("_rank"), F.col("unchanged_toast_columns").alias("_toast"))
    same_key = " AND ".join(f"before.`{k}` <=> after.`{k}`" for k in key_fields) or "true"
    deletes = changes.where(f"op = 'd' OR (op = 'u' AND before IS NOT NULL AND NOT ({same_key}))").select(
        *_fields_of("before", row_type), "commit_lsn", "total_order", F.lit(True).alias("_deleted"),
        F.lit(1).alias("_rank"), no_toast.alias("_toast"))
    current = existing.select(*_stored_fields(existing, row_type), F.col(COMMIT_LSN_COLUMN).alias("commit_lsn"),
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
        for n, t in zip(names, texts, strict=True):
            sent = F.when(~F.array_contains("_toast", n), F.struct(F.col(f"`{n}`").alias("v"), F.col(t).alias("t")))
            last = F.last(sent, ignorenulls=True).over(history)
            filled += [last.getField("v").alias(n), last.getField("t").alias(t)]
        entries = entries.select(*filled, *meta)
    latest = Window.partitionBy(*keys).orderBy(F.desc("commit_lsn"), F.desc("total_order"), F.desc("_rank"))
    return (entries.withColumn("_n", F.row_number().over(latest)).where("_n = 1 AND NOT _deleted")
            .select(*_output(row_type, "commit_lsn", "total_order")))


def merge_keyless(existing: DataFrame, changes: DataFrame, row_type: StructType,
                  truncate: tuple[int, int] | None, resets: Mapping[str, Position] | None = None) -> DataFrame:
    """A table without key columns (REPLICA IDENTITY FULL) as a multiset of rows: inserts add a
    row, deletes remove one equal to ``before``, updates do both. Counting commutes, so only the
    truncate needs positions."""
    columns = _with_texts(row_type)
    adds = changes.where("op IN ('c', 'r', 'u')").select(*_fields_of("after", row_type), "commit_lsn",
                                                         "total_order", F.lit(1).alias("_n"))
    removes = changes.where("op IN ('u', 'd') AND before IS NOT NULL").select(
        *_fields_of("before", row_type), "commit_lsn", "total_order", F.lit(-1).alias("_n"))
    current = existing.select(*_stored_fields(existing, row_type), F.col(COMMIT_LSN_COLUMN).alias("commit_lsn"),
                              F.col(TOTAL_ORDER_COLUMN).alias("total_order"), F.lit(1).alias("_n"))
    entries = _reset_dropped(current.unionByName(adds), row_type, resets or {}).unionByName(
        _reset_dropped(removes, row_type, resets or {}))
    if truncate is not None:
        lsn, order = truncate
        entries = entries.where((F.col("commit_lsn") > lsn) | ((F.col("commit_lsn") == lsn)
                                                               & (F.col("total_order") >= order)))
    grouped = entries.groupBy(*[F.col(f"`{c}`") for c in columns]).agg(
        F.sum("_n").alias("_n"), F.max(F.struct("commit_lsn", "total_order")).alias("_p"))
    return (grouped.where("_n > 0").withColumn("_copy", F.explode(F.sequence(F.lit(1), F.col("_n").cast("int"))))
            .select(*_output(row_type, "_p.commit_lsn", "_p.total_order")))
