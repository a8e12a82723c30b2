"""Avro writer schemas → Spark types, and the merge of a table's writer schemas into the latest.

Pure: nothing here needs a SparkSession (only ``pyspark.sql.types``), so it is unit-tested alone.

Mapping (as spark-avro's ``SchemaConverters`` does, so the Python decoder and Spark's own
``from_avro`` agree column for column):

=====================================  ===============================================
Avro                                   Spark
=====================================  ===============================================
boolean / int / long / float / double  BooleanType / IntegerType / LongType / FloatType / DoubleType
string, enum, ``uuid``                 StringType
bytes, fixed                           BinaryType
``decimal(p,s)``, p <= 38              DecimalType(p, s)
``decimal(p,s)``, p > 38               StringType (the exact digits; Spark decimals stop at 38)
``date``                               DateType
``timestamp-micros/millis``            TimestampType
``local-timestamp-micros/millis``      TimestampNTZType
``time-micros`` / ``time-millis``      LongType / IntegerType (since midnight, as spark-avro)
array / map / record                   ArrayType / MapType(StringType, …) / StructType
``["null", T]``                        T, nullable
other unions                           StructType(member0, member1, …) (as spark-avro)
=====================================  ===============================================

Evolution: a table's row record (``Value``) changes when columns are added, dropped or retyped.
Records written with any writer schema decode into one Spark schema, that of the *latest* writer
schema: its fields in its order; a field an older record lacks is null, a field only older records
have is dropped, and a retyped field is converted where that is exact (int → long, float →
double, a decimal to a wider one, anything → string) and null otherwise, so the stream never fails
on an ALTER TABLE.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

AvroSchema = Any
"""An Avro schema as parsed JSON: a name, a union list or a complex type."""

MAX_SPARK_DECIMAL_PRECISION: Final = 38

_PRIMITIVE: Final[Mapping[str, DataType]] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}


class SchemaConversionError(ValueError):
    """An Avro schema that has no Spark form (a recursive record)."""


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def resolve_named(schema: AvroSchema, named: dict[str, Any] | None = None,
                  namespace: str | None = None) -> AvroSchema:
    """``schema`` with every reference to a named type replaced by its definition (a tree).

    Later code then never needs a symbol table. Recursive types are refused: a Spark schema is
    finite.
    """
    named = {} if named is None else named

    def walk(node: Any, ns: str | None, stack: tuple[str, ...]) -> Any:
        if isinstance(node, str):
            if node in _PRIMITIVE or node == "null":
                return node
            full = _full_name(node, ns)
            target = named.get(full, named.get(node))
            if target is None:
                raise SchemaConversionError(f"unknown Avro type name {node!r}")
            if full in stack:
                raise SchemaConversionError(f"recursive Avro type {full} has no Spark form")
            return target
        if isinstance(node, list):
            return [walk(branch, ns, stack) for branch in node]
        if not isinstance(node, dict):
            raise SchemaConversionError(f"not an Avro schema: {node!r}")
        kind = node["type"]
        if isinstance(kind, (dict, list)):
            return walk(kind, ns, stack)
        out = dict(node)
        if kind in ("record", "error", "enum", "fixed"):
            full = _full_name(node["name"], node.get("namespace") or ns)
            named[full] = out
            if kind in ("record", "error"):
                inner = full.rpartition(".")[0] or None
                out["fields"] = [{**f, "type": walk(f["type"], inner, (*stack, full))} for f in node["fields"]]
        elif kind == "array":
            out["items"] = walk(node["items"], ns, stack)
        elif kind == "map":
            out["values"] = walk(node["values"], ns, stack)
        elif kind not in _PRIMITIVE and kind != "null":
            return walk(kind, ns, stack)
        return out

    return walk(schema, namespace, ())


def nullable_branch(schema: AvroSchema) -> tuple[AvroSchema, bool]:
    """``(T, True)`` for ``["null", T]`` (either order), ``(schema, False)`` otherwise."""
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        if len(others) == 1 and len(others) < len(schema):
            return others[0], True
        if not others:
            return "null", True
    return schema, False


def avro_to_spark(schema: AvroSchema) -> tuple[DataType, bool]:
    """The Spark type of a resolved Avro schema (see ``resolve_named``) and whether it is nullable."""
    inner, nullable = nullable_branch(schema)
    if isinstance(inner, list):
        members = [b for b in inner if b != "null"]
        return StructType([StructField(f"member{i}", avro_to_spark(b)[0], True)
                           for i, b in enumerate(members)]), True
    if isinstance(inner, str):
        if inner == "null":
            return StringType(), True
        return _PRIMITIVE[inner], nullable
    kind = inner["type"]
    logical = inner.get("logicalType")
    if kind in ("record", "error"):
        return record_to_struct(inner), nullable
    if kind == "array":
        element, element_nullable = avro_to_spark(inner["items"])
        return ArrayType(element, element_nullable), nullable
    if kind == "map":
        value, value_nullable = avro_to_spark(inner["values"])
        return MapType(StringType(), value, value_nullable), nullable
    if kind == "enum":
        return StringType(), nullable
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(inner["precision"]), int(inner.get("scale", 0))
        if precision <= MAX_SPARK_DECIMAL_PRECISION:
            return DecimalType(precision, scale), nullable
        return StringType(), nullable
    if kind == "fixed":
        return BinaryType(), nullable
    if kind == "int" and logical == "date":
        return DateType(), nullable
    if kind == "long" and logical in ("timestamp-micros", "timestamp-millis"):
        return TimestampType(), nullable
    if kind == "long" and logical in ("local-timestamp-micros", "local-timestamp-millis"):
        return TimestampNTZType(), nullable
    if kind in _PRIMITIVE:
        return _PRIMITIVE[kind], nullable
    raise SchemaConversionError(f"Avro type {kind!r} has no Spark form")


def record_to_struct(record: Mapping[str, Any]) -> StructType:
    """A resolved Avro record → ``StructType`` with one field per Avro field, in order."""
    fields = []
    for field in record["fields"]:
        data_type, nullable = avro_to_spark(field["type"])
        fields.append(StructField(field["name"], data_type, nullable,
                                  metadata={k: field[k] for k in ("pg_type", "pg_name", "pg_text_of", "aliases")
                                            if k in field}))
    return StructType(fields)


# --- a table's envelope --------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvelopeSchema:
    """The parts of one writer (envelope) schema the pipeline needs, Avro and Spark side by side."""

    avro: AvroSchema  # resolved: no named references left
    row: Mapping[str, Any]  # the resolved ``Value`` record
    row_type: StructType

    @staticmethod
    def parse(schema: AvroSchema | str) -> EnvelopeSchema:
        parsed = json.loads(schema) if isinstance(schema, str) else schema
        resolved = resolve_named(parsed)
        fields = {f["name"]: f for f in resolved["fields"]}
        if "after" not in fields or "op" not in fields:
            raise SchemaConversionError(f"{resolved.get('name')} is not a pgbridge change envelope")
        row, _ = nullable_branch(fields["after"]["type"])
        return EnvelopeSchema(resolved, row, record_to_struct(row))


SOURCE_TYPE: Final = StructType([
    StructField("db", StringType(), False),
    StructField("schema", StringType(), False),
    StructField("table", StringType(), False),
    StructField("lsn", LongType(), False),
    StructField("commit_lsn", LongType(), False),
    StructField("xid", LongType(), False),
    StructField("ts_us", LongType(), False),
    StructField("snapshot", BooleanType(), False),
    StructField("origin", StringType(), True),
])
TRANSACTION_TYPE: Final = StructType([
    StructField("id", StringType(), False),
    StructField("total_order", LongType(), False),
    StructField("data_collection_order", LongType(), False),
])


# The envelope's ``unrepresentable`` map: ``before.<column>`` / ``after.<column>`` → the exact
# Postgres text of a value its typed field holds as null (null for records of writers before it).
UNREPRESENTABLE_TYPE: Final = MapType(StringType(), StringType(), False)


def change_type(row_type: StructType, key_type: StructType | None) -> StructType:
    """Spark schema of decoded change rows of one table (``decode.ChangeDecoder`` output).

    Kafka coordinates and the writer schema id first, then the key (absent for tables without
    key columns), then the envelope as the contract lays it out, then ``commit_lsn`` and
    ``total_order`` lifted to the top (``total_order`` 0 for snapshot reads) because every later
    step orders by them.
    """
    key = [StructField("key", key_type, True)] if key_type is not None else []
    return StructType([
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("schema_id", StringType(), False),
        *key,
        StructField("op", StringType(), False),
        StructField("before", row_type, True),
        StructField("after", row_type, True),
        StructField("source", SOURCE_TYPE, False),
        StructField("transaction", TRANSACTION_TYPE, True),
        StructField("unchanged_toast_columns", ArrayType(StringType(), False), False),
        StructField("unrepresentable", UNREPRESENTABLE_TYPE, True),
        StructField("commit_lsn", LongType(), False),
        StructField("total_order", LongType(), False),
    ])


def latest_row_type(row_types: list[StructType]) -> StructType:
    """The merged Spark row type of a table: the last (newest) writer's fields.

    Kept as a function so the rule lives in one place: older fields that the newest writer lacks
    were dropped in Postgres and are dropped here too; an empty list has no columns.
    """
    return row_types[-1] if row_types else StructType([])
