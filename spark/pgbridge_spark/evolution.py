"""What a mirror's table must change before a batch's ``MERGE``: planned by pure code
(``plan_schema``, unit-tested alone), applied by ``apply_schema_plan`` as Spark SQL ``ALTER TABLE``
statements that Delta Lake and Iceberg both take.

The batch's rows have the table's *latest* row type (``schemas``); the table has the columns it was
last written with. ``plan_schema`` compares them and says what to do, in this order:

1. **renames**: a column of the row type that the table lacks, whose Avro field carries
   ``aliases`` naming a column the table has (and the row type no longer has): renamed in place,
   values kept (Delta's column mapping; Iceberg's column ids).
2. **drops**: a column the table has and the row type lacks; and a column that a writer schema
   without it used within the batch (``resets``: dropped and added again in Postgres, so its old
   values are gone there too): dropped, and added back as new.
3. **adds**: columns the table lacks, in the row type's order, after the last mirrored column
   (before the ``_pgbridge_`` columns), null in every stored row.
4. **retypes**: a column whose type changed; widened in place where the format allows (Delta's
   type widening; Iceberg's int → long, float → double, wider decimals) and rewritten with
   ``try_cast`` otherwise (null where not exact).

Types are compared loosely (nullability and field metadata aside): tables are created with every
column nullable, since the ``jvm`` decoder cannot prove a field non-null.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructField, StructType

from pgbridge_spark.jvm_decode import loose
from pgbridge_spark.merge import PGBRIDGE_PREFIX, Position, quoted

log = logging.getLogger("pgbridge_spark.evolution")

ALIASES: Final = "aliases"


@dataclass(frozen=True)
class SchemaPlan:
    renames: tuple[tuple[str, str], ...] = ()  # (stored name, new name)
    drops: tuple[str, ...] = ()
    adds: tuple[StructField, ...] = ()
    retypes: tuple[tuple[str, DataType], ...] = ()  # (name, new type)

    @property
    def empty(self) -> bool:
        return not (self.renames or self.drops or self.adds or self.retypes)


def mirrored_columns(stored: StructType) -> list[StructField]:
    """The stored table's own columns (without the ``_pgbridge_`` ones)."""
    return [f for f in stored.fields if not f.name.startswith(PGBRIDGE_PREFIX)]


def aliases_of(field: StructField) -> list[str]:
    return [str(a) for a in field.metadata.get(ALIASES, [])]


def plan_schema(stored: StructType, row_type: StructType, resets: Mapping[str, Position] | None = None) -> SchemaPlan:
    """What turns the stored table's columns into ``row_type``'s (see the module docstring)."""
    wanted = {f.name for f in row_type.fields}
    names = [f.name for f in mirrored_columns(stored)]
    types = {f.name: f.dataType for f in mirrored_columns(stored)}
    renames: list[tuple[str, str]] = []
    for field in row_type.fields:
        if field.name in names:
            continue
        old = next((a for a in aliases_of(field) if a in names and a not in wanted), None)
        if old is not None:
            renames.append((old, field.name))
            names[names.index(old)] = field.name
            types[field.name] = types.pop(old)
    reset = [c for c in (resets or {}) if c in names and c in wanted]
    drops = [c for c in names if c not in wanted] + reset
    kept = {c for c in names if c not in drops}
    adds = tuple(f for f in row_type.fields if f.name not in kept)
    retypes = tuple((f.name, f.dataType) for f in row_type.fields
                     if f.name in kept and loose(types[f.name]) != loose(f.dataType))
    return SchemaPlan(tuple(renames), tuple(drops), adds, retypes)


def table_schema(row_type: StructType, extra: Sequence[StructField]) -> StructType:
    """A new mirror table's schema: the row type's columns, nullable, then ``extra``."""
    return StructType([StructField(f.name, loose(f.dataType), True) for f in row_type.fields] + list(extra))


# --- applying a plan (I/O: SQL on the table) -----------------------------------------------------


def sql_type(spark: SparkSession, data_type: DataType) -> str:
    """``data_type`` as Spark SQL (names quoted), from the JVM's own printer."""
    jvm = spark._jvm
    assert jvm is not None
    return str(jvm.org.apache.spark.sql.types.DataType.fromJson(data_type.json()).sql())


def cast_column(frame: DataFrame, name: str, data_type: DataType) -> DataFrame:
    """``frame`` with column ``name`` as ``data_type`` (``try_cast``: null where not exact), in place:
    the rewrite of a retype a table format cannot widen."""
    return frame.select(*[F.col(quoted(c)).try_cast(data_type).alias(c) if c == name else F.col(quoted(c))
                          for c in frame.columns])


def apply_schema_plan(spark: SparkSession, table: str, plan: SchemaPlan, stored: StructType,
                      rewrite: Callable[[str, DataType], None]) -> None:
    """Apply ``plan`` to ``table`` (its SQL name, in any format that takes Spark's ``ALTER TABLE``):
    renames, drops, adds after the last mirrored column, and retypes in place where the format
    widens the type; ``rewrite(column, type)`` takes a retype the format refuses."""
    for old, new in plan.renames:
        log.info("%s: column %s renamed to %s", table, old, new)
        spark.sql(f"ALTER TABLE {table} RENAME COLUMN {quoted(old)} TO {quoted(new)}")
    if plan.drops:
        log.info("%s: columns dropped: %s", table, ", ".join(plan.drops))
        spark.sql(f"ALTER TABLE {table} DROP COLUMNS ({', '.join(quoted(c) for c in plan.drops)})")
    if plan.adds:
        now = spark.sql(f"SELECT * FROM {table} LIMIT 0").schema  # after the renames and drops
        mirrored = [f.name for f in mirrored_columns(now)]
        after = mirrored[-1] if mirrored else None
        for field in plan.adds:
            position = f" AFTER {quoted(after)}" if after else " FIRST"
            spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({quoted(field.name)} {sql_type(spark, field.dataType)}{position})")
            after = field.name
        log.info("%s: columns added: %s", table, ", ".join(f.name for f in plan.adds))
    for name, data_type in plan.retypes:
        try:
            spark.sql(f"ALTER TABLE {table} ALTER COLUMN {quoted(name)} TYPE {sql_type(spark, data_type)}")
            log.info("%s: column %s widened to %s", table, name, data_type.simpleString())
        except Exception as exc:  # the format refuses: not a widening it supports
            log.info("%s: column %s rewritten as %s (%s)", table, name, data_type.simpleString(),
                     str(exc).splitlines()[0][:200])
            rewrite(name, data_type)
