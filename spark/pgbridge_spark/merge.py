"""How a table's changes become one Delta ``MERGE``: pure DataFrame plans, no I/O (``delta`` runs them).

A keyed table keeps, per key, the entry at the highest ``(commit_lsn, total_order)``. The batch is
first reduced to that last entry per key (``reduce_keyed``): a delete, a key-changing update (its
``before`` carries the old key: a delete there) or an upsert, with the TOAST columns that no change
of the batch sent still marked, so that the ``MERGE`` keeps the target's value for them. The
``MERGE`` then touches only the batch's keys: work in proportion to the changes, not the table.
Its ``WHEN MATCHED`` clauses apply an entry only if it is newer than the stored row, so an older
change that arrives late (another partition) cannot undo a newer one.

A table without key columns is a multiset of rows (``keyless_source``): per distinct row value
touched by the batch, the copies the table holds now plus the inserts minus the deletes; the
``MERGE`` deletes the stored copies of those values and inserts the new count.

Both honour truncates (rows positioned before one go: ``WHEN NOT MATCHED BY SOURCE``), and columns
dropped and added again within the batch (``_reset_dropped``).

Values a typed column cannot hold (the envelope's ``unrepresentable`` map: ``infinity`` dates,
``NaN`` numerics, arrays of several dimensions...) are null in their column and kept in the
mirror's map column ``_pgbridge_unrepresentable`` (column name → exact Postgres text). Inside a
plan each column's text travels as a hidden companion column beside it, so it follows the
column's value through every rule above (a map cannot be grouped or carried per column).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

COMMIT_LSN_COLUMN: Final = "_pgbridge_commit_lsn"
TOTAL_ORDER_COLUMN: Final = "_pgbridge_total_order"
UNREPRESENTABLE_COLUMN: Final = "_pgbridge_unrepresentable"
UNREPRESENTABLE_MIRROR_TYPE: Final = MapType(StringType(), StringType(), True)
PGBRIDGE_PREFIX: Final = "_pgbridge_"

# Columns of a reduced batch beside the row's own (prefixed: a table may have a column ``op``)
LSN: Final = "_pgbridge_s_lsn"
ORDER: Final = "_pgbridge_s_order"
DELETED: Final = "_pgbridge_s_deleted"
TOAST: Final = "_pgbridge_s_toast"  # columns whose stored value the row keeps (unchanged TOAST)
MATCH: Final = "_pgbridge_s_match"  # keyless: a row that deletes stored copies (else: one to insert)

Position = tuple[int, int]


def text_column(index: int) -> str:
    """The hidden companion column holding the unrepresentable text of the row type's field ``index``."""
    return f"_pgbridge_text_{index}"


def quoted(name: str, alias: str | None = None) -> str:
    escaped = "`" + name.replace("`", "``") + "`"
    return f"{alias}.{escaped}" if alias else escaped


def _fields_of(image: str, row_type: StructType) -> list[Column]:
    """The columns of a change's ``before`` / ``after``, each followed by its text from the envelope's
    ``unrepresentable`` map (key ``{image}.{column}``)."""
    out = []
    for i, f in enumerate(row_type.fields):
        out.append(F.col(image).getField(f.name).alias(f.name))
        out.append(F.col("unrepresentable").getItem(f"{image}.{f.name}").alias(text_column(i)))
    return out


def _before(lsn: int, order: int, lsn_col: str = LSN, order_col: str = ORDER) -> Column:
    return (F.col(lsn_col) < lsn) | ((F.col(lsn_col) == lsn) & (F.col(order_col) < order))


def _reset_dropped(entries: DataFrame, row_type: StructType, resets: Mapping[str, Position]) -> DataFrame:
    """Null column ``c`` in entries positioned before ``resets[c]``: a writer schema without ``c``
    was in use there, so ``c`` was dropped after them (and maybe added again since)."""
    if not resets:
        return entries
    columns = {c: F.col(quoted(c)) for c in entries.columns}
    for i, f in enumerate(row_type.fields):
        if f.name in resets:
            before = _before(*resets[f.name])
            columns[f.name] = F.when(before, F.lit(None).cast(f.dataType)).otherwise(columns[f.name]).alias(f.name)
            columns[text_column(i)] = F.when(before, F.lit(None).cast("string")).otherwise(
                columns[text_column(i)]).alias(text_column(i))
    return entries.select(*columns.values())


def _after_truncate(entries: DataFrame, truncate: Position | None) -> DataFrame:
    return entries if truncate is None else entries.where(~_before(*truncate))


def reduce_keyed(changes: DataFrame, row_type: StructType, key_fields: Sequence[str], truncate: Position | None,
                 with_toast: bool, resets: Mapping[str, Position] | None = None) -> DataFrame:
    """One entry per key: the change at the highest position (after the truncate, if any).

    Columns: the row's, each with its text companion, then ``LSN``, ``ORDER``, ``DELETED`` and
    ``TOAST``. An update that changes the key also yields a delete of the old key. With
    ``with_toast``, a column an update left as unchanged TOAST takes the value of the key's last
    earlier change in the batch that sent it; if none did, it is listed in ``TOAST`` and the
    ``MERGE`` keeps the stored value.
    """
    names = [f.name for f in row_type.fields]
    no_toast = F.array().cast("array<string>")
    upserts = changes.where("op IN ('c', 'r', 'u')").select(
        *_fields_of("after", row_type), F.col("commit_lsn").alias(LSN), F.col("total_order").alias(ORDER),
        F.lit(False).alias(DELETED), F.col("unchanged_toast_columns").alias(TOAST))
    same_key = " AND ".join(f"before.{quoted(k)} <=> after.{quoted(k)}" for k in key_fields) or "true"
    deletes = changes.where(f"op = 'd' OR (op = 'u' AND before IS NOT NULL AND NOT ({same_key}))").select(
        *_fields_of("before", row_type), F.col("commit_lsn").alias(LSN), F.col("total_order").alias(ORDER),
        F.lit(True).alias(DELETED), no_toast.alias(TOAST))
    entries = _after_truncate(_reset_dropped(upserts, row_type, resets or {}).unionByName(deletes), truncate)
    keys = [F.col(quoted(k)) for k in key_fields]
    if with_toast:
        history = (Window.partitionBy(*keys).orderBy(LSN, ORDER)
                   .rowsBetween(Window.unboundedPreceding, Window.currentRow))
        filled: list[Column] = []
        unresolved: list[Column] = []
        for i, n in enumerate(names):
            sent = F.when(~F.array_contains(TOAST, n), F.struct(F.col(quoted(n)).alias("v"),
                                                                 F.col(text_column(i)).alias("t")))
            last = F.last(sent, ignorenulls=True).over(history)
            filled += [last.getField("v").alias(n), last.getField("t").alias(text_column(i))]
            unresolved.append(F.when(last.isNull(), F.lit(n)))
        still = F.filter(F.array(*unresolved), lambda c: c.isNotNull()) if unresolved else no_toast
        entries = entries.select(*filled, LSN, ORDER, DELETED, still.alias(TOAST))
    else:
        entries = entries.withColumn(TOAST, no_toast)
    latest = Window.partitionBy(*keys).orderBy(F.desc(LSN), F.desc(ORDER), F.desc(DELETED))
    return entries.withColumn("_pgbridge_n", F.row_number().over(latest)).where("_pgbridge_n = 1").drop("_pgbridge_n")


_MAP_SQL: Final = "MAP<STRING, STRING>"


def _collapse_texts(row_type: StructType, texts: Sequence[str]) -> str:
    """Per-column texts (SQL expressions) back into ``_pgbridge_unrepresentable``, as SQL (null
    when no column needs one)."""
    if not row_type.fields:
        return f"CAST(NULL AS {_MAP_SQL})"
    entries = ", ".join(f"named_struct('key', {sql_string(f.name)}, 'value', {t})"
                        for f, t in zip(row_type.fields, texts, strict=True))
    found = f"map_from_entries(filter(array({entries}), e -> e.value IS NOT NULL))"
    return f"CAST(CASE WHEN size({found}) > 0 THEN {found} END AS {_MAP_SQL})"


def mirror_rows(source: DataFrame, row_type: StructType, keyed: bool) -> DataFrame:
    """The mirror's rows from a ``MERGE`` source (a table's first write: nothing stored to merge with)."""
    texts = [text_column(i) for i in range(len(row_type.fields))]
    return source.where(~F.col(DELETED) if keyed else ~F.col(MATCH)).select(
        *[F.col(quoted(f.name)) for f in row_type.fields],
        F.expr(_collapse_texts(row_type, texts)).alias(UNREPRESENTABLE_COLUMN),
        F.col(LSN).alias(COMMIT_LSN_COLUMN), F.col(ORDER).alias(TOTAL_ORDER_COLUMN))


@dataclass(frozen=True)
class MergePlan:
    """One ``MERGE``, every part a SQL expression over aliases ``t`` (the table) and ``s`` (the
    source), so that each table format runs the same plan (``delta_tables.merge`` through Delta's
    builder, ``iceberg_tables.merge`` as a ``MERGE INTO`` statement: ``merge_statement``)."""

    condition: str
    delete_when: str | None  # WHEN MATCHED AND ... THEN DELETE
    update_when: str | None  # WHEN MATCHED AND ... THEN UPDATE SET update
    update: Mapping[str, str]  # quoted column → SQL expression
    insert_when: str  # WHEN NOT MATCHED AND ... THEN INSERT insert
    insert: Mapping[str, str]
    truncate_before: Position | None  # WHEN NOT MATCHED BY SOURCE AND position < this THEN DELETE
    truncate_update: Mapping[str, str] | None = None  # ... THEN UPDATE SET this instead (history)

    @property
    def truncate_when(self) -> str | None:
        """The ``WHEN NOT MATCHED BY SOURCE`` condition: stored rows positioned before the
        truncate (with history, only current versions are closed)."""
        if self.truncate_before is None:
            return None
        lsn, order = self.truncate_before
        t_lsn, t_order = quoted(COMMIT_LSN_COLUMN, "t"), quoted(TOTAL_ORDER_COLUMN, "t")
        before = f"({t_lsn} < {int(lsn)} OR ({t_lsn} = {int(lsn)} AND {t_order} < {int(order)}))"
        return before if self.truncate_update is None else f"t.{CURRENT} AND {before}"


def merge_statement(target: str, source: str, plan: MergePlan) -> str:
    """``plan`` as one SQL ``MERGE INTO`` of the view ``source`` into the table ``target`` (both
    already quoted), with the clauses in the order Delta's builder applies them."""
    def assignments(values: Mapping[str, str]) -> str:
        return ", ".join(f"t.{column} = {value}" for column, value in values.items())

    clauses = [f"MERGE INTO {target} t USING {source} s ON {plan.condition}"]
    if plan.delete_when is not None:
        clauses.append(f"WHEN MATCHED AND ({plan.delete_when}) THEN DELETE")
    if plan.update_when is not None:
        clauses.append(f"WHEN MATCHED AND ({plan.update_when}) THEN UPDATE SET {assignments(plan.update)}")
    columns, values = ", ".join(plan.insert), ", ".join(plan.insert.values())
    clauses.append(f"WHEN NOT MATCHED AND ({plan.insert_when}) THEN INSERT ({columns}) VALUES ({values})")
    if plan.truncate_when is not None:
        action = "DELETE" if plan.truncate_update is None else f"UPDATE SET {assignments(plan.truncate_update)}"
        clauses.append(f"WHEN NOT MATCHED BY SOURCE AND ({plan.truncate_when}) THEN {action}")
    return "\n".join(clauses)


KEY_LOW: Final = "key_low"
KEY_HIGH: Final = "key_high"


def range_key(key_type: StructType | None) -> str | None:
    """The key column a ``MERGE`` can be bounded by (``with_key_range``): a single integral one,
    whose minimum and maximum Delta keeps per file (the common serial / identity key)."""
    if key_type is None or len(key_type.fields) != 1:
        return None
    field = key_type.fields[0]
    return field.name if isinstance(field.dataType, (ByteType, ShortType, IntegerType, LongType)) else None


def key_bounds(key: str) -> list[Column]:
    """Aggregates of a batch of change rows: the lowest and highest value of ``key`` in either
    image (a delete's and a key change's old key is in ``before``), ``KEY_LOW`` / ``KEY_HIGH``."""
    after, before = _key_images(key)
    return [F.min(F.least(after, before)).alias(KEY_LOW), F.max(F.greatest(after, before)).alias(KEY_HIGH)]


def _key_images(key: str) -> tuple[Column, Column]:
    """``key`` in a change row's new and old image (a delete's and a key change's old key is in
    ``before``)."""
    return F.col("after").getField(key), F.col("before").getField(key)


def with_key_range(plan: MergePlan, key: str, low: int, high: int) -> MergePlan:
    """``plan`` whose condition also bounds the target's ``key`` to ``[low, high]``, the batch's keys.

    A predicate on the target alone is what Delta's ``MERGE`` skips files by (their key
    minimum/maximum): a batch of recent inserts or of one hot key then reads the files holding its
    range, not the whole table. It changes no outcome: every source row's key is inside the range,
    so the same pairs match. Not for a plan with a truncate (``_narrowable``)."""
    return _narrowed(plan, f"{quoted(key, 't')} BETWEEN {int(low)} AND {int(high)}")


def _narrowable(plan: MergePlan) -> bool:
    """Whether a predicate on the target may narrow ``plan``: not with a truncate, whose ``WHEN NOT
    MATCHED BY SOURCE`` must see every row (and reads every file anyway)."""
    return plan.truncate_before is None


def _narrowed(plan: MergePlan, predicate: str) -> MergePlan:
    """``plan`` whose condition also holds ``predicate`` on the target, when it is ``_narrowable``."""
    return replace(plan, condition=f"{plan.condition} AND {predicate}") if _narrowable(plan) else plan


# The most changes a batch may hold for its MERGE to name its keys (``with_key_set``): beyond that
# the list costs more to plan than it saves.
KEY_SET_MAX: Final = 10_000


def key_set_worth(changes: int, low: int, high: int) -> bool:
    """Whether naming a batch's keys can narrow its ``MERGE`` beyond its key range: at most
    ``KEY_SET_MAX`` changes, and a range holding more integers than the batch has changes (keys
    spread over the table; a batch of consecutive keys is bounded by its range already)."""
    return 1 < changes <= KEY_SET_MAX and high - low + 1 > changes


def batch_keys(changes: DataFrame, key: str) -> DataFrame:
    """The distinct values of ``key`` in either image of a batch of change rows (column ``k``): every
    key the batch's ``MERGE`` source holds (a delete's and a key change's old key is in ``before``)."""
    images = F.array(*_key_images(key))
    return changes.select(F.explode(images).alias("k")).where(F.col("k").isNotNull()).distinct()


def with_key_set(plan: MergePlan, key: str, keys: Iterable[int]) -> MergePlan:
    """``plan`` whose condition also limits the target's ``key`` to ``keys``, the batch's keys.

    Why: with keys spread over the table no file's key range misses the batch, so the key range
    skips nothing, and Delta's ``MERGE`` reads the table three times (to find the touched files,
    to write the changed rows, to write the deletion vectors), each time carrying every row
    through its join. A predicate on the target alone is applied right after each of those scans,
    so only the batch's rows go on. It skips no more files than the range (Delta's data skipping
    takes an ``IN`` list by its lowest and highest value). It changes no outcome: every source
    row's key is in ``keys``, so the same pairs match. Not for a plan with a truncate (``_narrowable``)."""
    values = sorted({int(k) for k in keys})
    return _narrowed(plan, f"{quoted(key, 't')} IN ({', '.join(map(str, values))})") if values else plan


def bounded_to_batch(plan: MergePlan, key: str, low: int, high: int, changes: int,
                     keys: Callable[[], Iterable[int]]) -> MergePlan:
    """``plan`` bounded to the batch's key range (``with_key_range``) and, for few spread changes
    (``key_set_worth``), to its keys (``with_key_set``). ``keys`` runs a Spark job, so it is called
    only when the list is used: never for a plan with a truncate (``_narrowable``)."""
    bounded = with_key_range(plan, key, low, high)
    return with_key_set(bounded, key, keys()) if _narrowable(plan) and key_set_worth(changes, low, high) else bounded


def _newer() -> str:
    t_lsn, t_order = quoted(COMMIT_LSN_COLUMN, "t"), quoted(TOTAL_ORDER_COLUMN, "t")
    return f"(s.{LSN} > {t_lsn} OR (s.{LSN} = {t_lsn} AND s.{ORDER} > {t_order}))"


def keyed_plan(row_type: StructType, key_fields: Sequence[str], truncate: Position | None) -> MergePlan:
    """The ``MERGE`` of ``reduce_keyed`` entries: newer entries win; unresolved TOAST keeps the target's."""
    condition = " AND ".join(f"{quoted(k, 't')} = {quoted(k, 's')}" for k in key_fields)
    kept = [f"array_contains(s.{TOAST}, {sql_string(f.name)})" for f in row_type.fields]
    update = {quoted(f.name): f"CASE WHEN {keep} THEN {quoted(f.name, 't')} ELSE {quoted(f.name, 's')} END"
              for f, keep in zip(row_type.fields, kept, strict=True)}
    texts = [f"CASE WHEN {keep} THEN {quoted(UNREPRESENTABLE_COLUMN, 't')}[{sql_string(f.name)}] "
             f"ELSE s.{text_column(i)} END" for i, (f, keep) in enumerate(zip(row_type.fields, kept, strict=True))]
    positions = {quoted(COMMIT_LSN_COLUMN): f"s.{LSN}", quoted(TOTAL_ORDER_COLUMN): f"s.{ORDER}"}
    update |= {quoted(UNREPRESENTABLE_COLUMN): _collapse_texts(row_type, texts), **positions}
    insert_texts = [f"s.{text_column(i)}" for i in range(len(row_type.fields))]
    insert = {**{quoted(f.name): quoted(f.name, "s") for f in row_type.fields},
              quoted(UNREPRESENTABLE_COLUMN): _collapse_texts(row_type, insert_texts), **positions}
    return MergePlan(condition=condition, delete_when=f"s.{DELETED} AND {_newer()}",
                     update_when=f"NOT s.{DELETED} AND {_newer()}", update=update,
                     insert_when=f"NOT s.{DELETED}", insert=insert, truncate_before=truncate)


def _identity(row_type: StructType) -> list[str]:
    """A keyless row's identity: every column and its text."""
    return [name for i, f in enumerate(row_type.fields) for name in (f.name, text_column(i))]


def keyless_source(stored: DataFrame, changes: DataFrame, row_type: StructType, truncate: Position | None,
                   resets: Mapping[str, Position] | None = None) -> DataFrame:
    """The ``MERGE`` source of a table without key columns (REPLICA IDENTITY FULL), a multiset.

    For each distinct row value the batch inserts or deletes: one ``MATCH`` row (it deletes the
    stored copies), and as many copies to insert as the table then holds (stored copies positioned
    after the truncate + inserts - deletes). ``stored`` is the table as it is (column + text
    companions + positions, ``stored_entries``).
    """
    identity = _identity(row_type)
    adds = changes.where("op IN ('c', 'r', 'u')").select(*_fields_of("after", row_type), F.col("commit_lsn").alias(LSN),
                                                         F.col("total_order").alias(ORDER), F.lit(1).alias("_n"))
    removes = changes.where("op IN ('u', 'd') AND before IS NOT NULL").select(
        *_fields_of("before", row_type), F.col("commit_lsn").alias(LSN), F.col("total_order").alias(ORDER),
        F.lit(-1).alias("_n"))
    entries = _after_truncate(_reset_dropped(adds, row_type, resets or {}).unionByName(
        _reset_dropped(removes, row_type, resets or {})), truncate)
    touched = entries.select(*[quoted(c) for c in identity]).distinct()
    on = [F.col(quoted(c, "e")).eqNullSafe(F.col(quoted(c, "v"))) for c in identity]
    condition = on[0] if on else F.lit(True)
    for c in on[1:]:
        condition = condition & c
    current = _after_truncate(stored, truncate).alias("e").join(F.broadcast(touched.alias("v")), condition, "left_semi")
    counted = current.select(*[quoted(c) for c in identity], LSN, ORDER, F.lit(1).alias("_n")).unionByName(entries)
    grouped = counted.groupBy(*[F.col(quoted(c)) for c in identity]).agg(
        F.sum("_n").alias("_n"), F.max(F.struct(LSN, ORDER)).alias("_p"))
    copies = (grouped.where("_n > 0").withColumn("_copy", F.explode(F.sequence(F.lit(1), F.col("_n").cast("int"))))
              .select(*[quoted(c) for c in identity], F.col(f"_p.{LSN}").alias(LSN),
                      F.col(f"_p.{ORDER}").alias(ORDER), F.lit(False).alias(MATCH)))
    matches = touched.select("*", F.lit(0).cast("long").alias(LSN), F.lit(0).cast("long").alias(ORDER),
                             F.lit(True).alias(MATCH))
    return matches.unionByName(copies)


def stored_entries(table: DataFrame, row_type: StructType) -> DataFrame:
    """The stored mirror as keyless entries: each column, its text, the position."""
    columns: list[Column] = []
    for i, f in enumerate(row_type.fields):
        columns.append(F.col(quoted(f.name)))
        columns.append(F.col(UNREPRESENTABLE_COLUMN).getItem(f.name).alias(text_column(i)))
    return table.select(*columns, F.col(COMMIT_LSN_COLUMN).alias(LSN), F.col(TOTAL_ORDER_COLUMN).alias(ORDER))


def keyless_plan(row_type: StructType, truncate: Position | None) -> MergePlan:
    """The ``MERGE`` of ``keyless_source``: matched copies go, the new count is inserted."""
    same = [f"{quoted(f.name, 't')} <=> {quoted(f.name, 's')} AND "
            f"{quoted(UNREPRESENTABLE_COLUMN, 't')}[{sql_string(f.name)}] <=> s.{text_column(i)}"
            for i, f in enumerate(row_type.fields)]
    condition = " AND ".join([f"s.{MATCH}", *same])
    texts = [f"s.{text_column(i)}" for i in range(len(row_type.fields))]
    insert = {**{quoted(f.name): quoted(f.name, "s") for f in row_type.fields},
              quoted(UNREPRESENTABLE_COLUMN): _collapse_texts(row_type, texts),
              quoted(COMMIT_LSN_COLUMN): f"s.{LSN}", quoted(TOTAL_ORDER_COLUMN): f"s.{ORDER}"}
    return MergePlan(condition=condition, delete_when="true", update_when=None, update={},
                     insert_when=f"NOT s.{MATCH}", insert=insert, truncate_before=truncate)


def sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# --- history (SCD type 2) --------------------------------------------------------------------------

VALID_FROM: Final = "_pgbridge_valid_from"
VALID_FROM_LSN: Final = "_pgbridge_valid_from_lsn"
VALID_TO: Final = "_pgbridge_valid_to"
VALID_TO_LSN: Final = "_pgbridge_valid_to_lsn"
CURRENT: Final = "_pgbridge_current"
CLOSE: Final = "_pgbridge_s_close"  # a source row that closes the key's current version
TIME: Final = "_pgbridge_s_time"


def history_source(changes: DataFrame, row_type: StructType, key_fields: Sequence[str],
                   truncate: Position | None) -> DataFrame:
    """The ``MERGE`` source of a history table (SCD type 2) of a keyed table.

    Every insert or update of the batch is a version of its key, valid from its commit (time and
    LSN) to the key's next change in the batch (an update or a delete), current if there is none;
    and per key one ``CLOSE`` row, at the key's first change in the batch, which ends the stored
    current version. A column left as unchanged TOAST takes the key's last earlier value in the
    batch (else it is null: the stored version keeps it).
    """
    names = [f.name for f in row_type.fields]
    time = F.col("source.ts_us").alias(TIME)
    upserts = changes.where("op IN ('c', 'r', 'u')").select(
        *_fields_of("after", row_type), F.col("commit_lsn").alias(LSN), F.col("total_order").alias(ORDER), time,
        F.lit(False).alias(DELETED), F.col("unchanged_toast_columns").alias(TOAST))
    same_key = " AND ".join(f"before.{quoted(k)} <=> after.{quoted(k)}" for k in key_fields) or "true"
    deletes = changes.where(f"op = 'd' OR (op = 'u' AND before IS NOT NULL AND NOT ({same_key}))").select(
        *_fields_of("before", row_type), F.col("commit_lsn").alias(LSN), F.col("total_order").alias(ORDER), time,
        F.lit(True).alias(DELETED), F.array().cast("array<string>").alias(TOAST))
    entries = _after_truncate(upserts.unionByName(deletes), truncate)
    keys = [F.col(quoted(k)) for k in key_fields]
    order = Window.partitionBy(*keys).orderBy(LSN, ORDER, DELETED)
    history = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    filled: list[Column] = []
    for i, n in enumerate(names):
        sent = F.when(~F.array_contains(TOAST, n), F.struct(F.col(quoted(n)).alias("v"), F.col(text_column(i)).alias("t")))
        last = F.last(sent, ignorenulls=True).over(history)
        filled += [last.getField("v").alias(n), last.getField("t").alias(text_column(i))]
    nxt = F.lead(F.struct(LSN, TIME), 1).over(order)
    first = F.first(F.struct(LSN, ORDER, TIME)).over(order.rowsBetween(Window.unboundedPreceding,
                                                                         Window.unboundedFollowing))
    timed = entries.select(*filled, LSN, ORDER, TIME, DELETED, nxt.alias("_next"), first.alias("_first"))
    versions = timed.where(~F.col(DELETED)).select(
        *[quoted(c) for c in _identity(row_type)], LSN, ORDER, TIME,
        F.col(f"_next.{LSN}").alias(VALID_TO_LSN), F.col(f"_next.{TIME}").alias("_to"), F.lit(False).alias(CLOSE))
    closes = (timed.where(F.col(LSN) == F.col(f"_first.{LSN}")).where(F.col(ORDER) == F.col(f"_first.{ORDER}"))
              .select(*[F.col(quoted(k)) for k in key_fields],
                      *[F.lit(None).cast(f.dataType).alias(f.name) for f in row_type.fields if f.name not in key_fields],
                      *[F.lit(None).cast("string").alias(text_column(i)) for i in range(len(names))],
                      LSN, ORDER, TIME, F.lit(None).cast("long").alias(VALID_TO_LSN), F.lit(None).cast("long").alias("_to"),
                      F.lit(True).alias(CLOSE)))
    return versions.unionByName(closes)


HISTORY_FIELDS: Final = (
    StructField(VALID_FROM, TimestampType(), True), StructField(VALID_FROM_LSN, LongType(), True),
    StructField(VALID_TO, TimestampType(), True), StructField(VALID_TO_LSN, LongType(), True),
    StructField(CURRENT, BooleanType(), True))


def history_plan(row_type: StructType, key_fields: Sequence[str], truncate: Position | None,
                 truncate_time: int | None) -> MergePlan:
    """Close the stored current version of every key the batch changes (if the change is newer),
    insert the batch's versions; a truncate closes every current version positioned before it."""
    condition = " AND ".join([f"s.{CLOSE}", f"t.{CURRENT}", *(f"{quoted(k, 't')} = {quoted(k, 's')}" for k in key_fields)])
    update = {VALID_TO_LSN: f"s.{LSN}", VALID_TO: f"timestamp_micros(s.{TIME})", CURRENT: "false"}
    texts = [f"s.{text_column(i)}" for i in range(len(row_type.fields))]
    insert = {**{quoted(f.name): quoted(f.name, "s") for f in row_type.fields},
              quoted(UNREPRESENTABLE_COLUMN): _collapse_texts(row_type, texts),
              quoted(COMMIT_LSN_COLUMN): f"s.{LSN}", quoted(TOTAL_ORDER_COLUMN): f"s.{ORDER}",
              VALID_FROM: f"timestamp_micros(s.{TIME})", VALID_FROM_LSN: f"s.{LSN}",
              VALID_TO: "timestamp_micros(s._to)", VALID_TO_LSN: f"s.{VALID_TO_LSN}",
              CURRENT: f"s.{VALID_TO_LSN} IS NULL"}
    truncate_update = None
    if truncate is not None:
        at = "NULL" if truncate_time is None else str(int(truncate_time))
        truncate_update = {VALID_TO_LSN: f"CAST({int(truncate[0])} AS BIGINT)",
                           VALID_TO: f"timestamp_micros(CAST({at} AS BIGINT))", CURRENT: "false"}
    return MergePlan(condition=condition, delete_when=None, update_when=_newer(), update=update,
                     insert_when=f"NOT s.{CLOSE}", insert=insert, truncate_before=truncate,
                     truncate_update=truncate_update)
