"""Decoding pgbridge records inside the JVM with spark-avro's ``from_avro`` (the ``jvm`` decoder).

The Python decoder (``decode``, run by ``mapInArrow``) ships every record to a Python worker and
back as Arrow. This one keeps records in the JVM: per writer schema of a table's micro-batch, the
records framed with that schema's header (``C3 01`` + fingerprint, or ``00`` + registry id) have
the header cut off and go through ``from_avro(body, writer schema, {"mode": "FAILFAST",
"avroSchema": latest schema})``. ``avroSchema`` is spark-avro's *evolved reader schema*: Avro's own
schema resolution turns every writer's records into the table's latest envelope, so all records of
the table come out as one Spark type, the one ``schemas.change_type`` gives the Python decoder.

Avro resolution is not the Python decoder's evolution rule in every case, and where it differs it
is not always an error: a ``decimal(12,2)`` column altered to ``decimal(14,3)`` is ``bytes`` to
``bytes`` for Avro, so the old unscaled digits would be read with the new scale (10.50 as 1.050).
``resolution_problem`` therefore lets ``from_avro`` resolve only what it resolves exactly: identical
types (logical type, precision and scale included), added and dropped fields, and the plain
promotions the Python decoder also makes (int → long, float, double; long → double; float →
double). A micro-batch of a table with any other change (a retyped decimal, anything → string) is
decoded by the Python decoder (``JvmDecodeUnavailable`` says why), as is a table whose latest
schema has a type ``from_avro`` maps differently (a decimal wider than Spark's 38 digits, which
the Python decoder keeps as exact text): ``jvm_change_frame`` compares the types before using it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from pgbridge_spark.schemas import (
    SOURCE_TYPE,
    TRANSACTION_TYPE,
    UNREPRESENTABLE_TYPE,
    AvroSchema,
    SchemaConversionError,
    nullable_branch,
    resolve_named,
)
from pgbridge_spark.source import loadable, missing_packages_message

AVRO_FUNCTIONS_CLASS: Final = "org.apache.spark.sql.avro.AvroDataToCatalyst"

# Avro promotions (writer, reader) that the Python decoder makes too (``decode._WIDENINGS``).
# long → float is an Avro promotion but not exact, so the Python decoder nulls it: not listed.
_PROMOTIONS: Final = frozenset({("int", "long"), ("int", "float"), ("int", "double"), ("long", "double"),
                                ("float", "double")})
_TYPE_ATTRIBUTES: Final = ("logicalType", "precision", "scale", "size")
_TIME_TYPES: Final = ("time-micros", "time-millis")


class JvmDecodeUnavailable(RuntimeError):
    """``from_avro`` cannot decode this table's micro-batch exactly: the Python decoder does it."""


class MissingSparkAvro(RuntimeError):
    """The ``jvm`` decoder was chosen but spark-avro is not on Spark's class path."""


# --- which schema changes from_avro resolves exactly ----------------------------------------------


def _name(schema: Mapping[str, Any]) -> str:
    name = str(schema.get("name", ""))
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def resolution_problem(writer: AvroSchema, reader: AvroSchema, path: str = "") -> str | None:
    """``None`` if Avro resolution of resolved ``writer`` into resolved ``reader`` gives exactly
    the Python decoder's values, else what differs (at ``path``)."""
    w_inner, w_nullable = nullable_branch(writer)
    r_inner, r_nullable = nullable_branch(reader)
    where = path or "<root>"
    if w_nullable and not r_nullable:
        return f"{where}: nullable in the writer, not in the reader"
    if isinstance(w_inner, list) or isinstance(r_inner, list):
        return None if w_inner == r_inner else f"{where}: unions differ"
    if isinstance(w_inner, str) or isinstance(r_inner, str):
        w_kind = w_inner if isinstance(w_inner, str) else w_inner["type"]
        r_kind = r_inner if isinstance(r_inner, str) else r_inner["type"]
        w_attrs = {} if isinstance(w_inner, str) else {k: w_inner.get(k) for k in _TYPE_ATTRIBUTES if k in w_inner}
        r_attrs = {} if isinstance(r_inner, str) else {k: r_inner.get(k) for k in _TYPE_ATTRIBUTES if k in r_inner}
        if w_attrs or r_attrs:
            return None if (w_kind, w_attrs) == (r_kind, r_attrs) else f"{where}: {w_kind}{w_attrs} → {r_kind}{r_attrs}"
        if w_kind == r_kind or (w_kind, r_kind) in _PROMOTIONS:
            return None
        return f"{where}: {w_kind} → {r_kind}"
    w_kind, r_kind = w_inner["type"], r_inner["type"]
    if w_kind != r_kind:
        return f"{where}: {w_kind} → {r_kind}"
    if w_kind in ("record", "error"):
        if _name(w_inner) != _name(r_inner):
            return f"{where}: record {_name(w_inner)} → {_name(r_inner)}"
        written = {f["name"]: f for f in w_inner["fields"]}
        for field in r_inner["fields"]:
            inner_path = f"{path}.{field['name']}" if path else field["name"]
            if field["name"] not in written:
                if "default" not in field:
                    return f"{inner_path}: added without a default"
                continue
            problem = resolution_problem(written[field["name"]]["type"], field["type"], inner_path)
            if problem:
                return problem
        return None
    if w_kind == "array":
        return resolution_problem(w_inner["items"], r_inner["items"], f"{path}[]")
    if w_kind == "map":
        return resolution_problem(w_inner["values"], r_inner["values"], f"{path}{{}}")
    # enum, fixed and logical types on primitives written as objects: only identical ones
    w_attrs = {k: v for k, v in w_inner.items() if k != "doc"}
    r_attrs = {k: v for k, v in r_inner.items() if k != "doc"}
    return None if w_attrs == r_attrs else f"{where}: {json.dumps(w_attrs)} → {json.dumps(r_attrs)}"


# --- the decoded frame -----------------------------------------------------------------------------


def loose(data_type: DataType) -> DataType:
    """``data_type`` with every field and element nullable and no field metadata: the part of a
    type two decoders must agree on (the JVM cannot prove a field non-null; see ``jvm_change_frame``)."""
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, loose(f.dataType), True) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(loose(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(loose(data_type.keyType), loose(data_type.valueType), True)
    return data_type


def _header_case(column: str, headers: Mapping[bytes, str], decode: Callable[[bytes, str], Column],
                 what: str) -> Column:
    """``CASE`` over the framing headers of ``column``: only the matching branch is evaluated, and
    a header not in ``headers`` fails the query (the Python decoder raises ``DecodeError`` there)."""
    if not headers:
        raise JvmDecodeUnavailable(f"no {what} header to decode")
    branches = sorted(headers.items())
    out: Column | None = None
    for header, schema_id in branches:
        matches = F.substring(F.col(column), 1, len(header)) == F.expr(f"X'{header.hex()}'")
        out = F.when(matches, decode(header, schema_id)) if out is None else out.when(
            matches, decode(header, schema_id))
    assert out is not None
    unknown = F.raise_error(F.concat(F.lit(f"pgbridge: {what} framed with a header not resolved for this "
                                           "micro-batch: "), F.hex(F.substring(F.col(column), 1, 10))))
    return out.otherwise(unknown)


def _without_time_types(schema: Any) -> Any:
    """``schema`` with ``time-micros`` / ``time-millis`` as their plain ``long`` / ``int``."""
    if isinstance(schema, list):
        return [_without_time_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: _without_time_types(v) for k, v in schema.items()
            if not (k == "logicalType" and v in _TIME_TYPES)}


def for_from_avro(text: str) -> str:
    """The schema text ``from_avro`` gets. spark-avro 4.2 maps ``time-micros`` to Spark's TIME
    type, which Spark refuses unless enabled; the contract's Spark form (``schemas``) is the stored
    number since midnight, exactly what the plain Avro type gives."""
    if not any(t in text for t in _TIME_TYPES):
        return text
    return json.dumps(_without_time_types(json.loads(text)))


def _from_avro(column: str, header: bytes, writer_text: str, reader_text: str) -> Column:
    from pyspark.sql.avro.functions import from_avro

    options = {"mode": "FAILFAST"}
    writer_text, reader_text = for_from_avro(writer_text), for_from_avro(reader_text)
    if writer_text != reader_text:
        options["avroSchema"] = reader_text
    body = F.expr(f"substring({column}, {len(header) + 1})")
    decoded: Column = from_avro(body, writer_text, options)
    return decoded


def _check_resolvable(headers: Mapping[bytes, str], texts: Mapping[str, str], reader_id: str, what: str) -> None:
    reader = resolve_named(json.loads(texts[reader_id]))
    for writer_id in sorted(set(headers.values())):
        if writer_id == reader_id:
            continue
        try:
            problem = resolution_problem(resolve_named(json.loads(texts[writer_id])), reader)
        except SchemaConversionError as exc:
            problem = str(exc)
        if problem:
            raise JvmDecodeUnavailable(f"{what} schema {writer_id} → {reader_id}: {problem}")


def jvm_change_frame(records: DataFrame, *, texts: Mapping[str, str], value_headers: Mapping[bytes, str],
                     schema_id: str, key_headers: Mapping[bytes, str], key_id: str | None,
                     out_type: StructType) -> DataFrame:
    """Records of one table topic (``topic``, ``partition``, ``offset``, ``key``, ``value``) → rows
    of ``out_type`` (``schemas.change_type``) decoded by ``from_avro``.

    ``value_headers`` / ``key_headers`` map each framing header of the batch to its schema id;
    ``schema_id`` / ``key_id`` are the latest (reader) schemas. Raises ``JvmDecodeUnavailable``
    when ``from_avro`` would not give exactly the Python decoder's rows. The result's fields are
    all nullable (``from_avro`` cannot prove otherwise); types otherwise equal ``out_type``.
    """
    _check_resolvable(value_headers, texts, schema_id, "value")
    reader = texts[schema_id]
    envelope = _header_case("value", value_headers,
                            lambda header, writer: _from_avro("value", header, texts[writer], reader), "value")
    schema_ids = _header_case("value", value_headers, lambda _header, writer: F.lit(writer), "value")
    columns: list[Column] = [F.col("topic"), F.col("partition"), F.col("offset"), schema_ids.alias("schema_id")]
    key_field = out_type["key"] if "key" in out_type.fieldNames() else None
    if key_field is not None:
        if key_headers and key_id is not None:
            _check_resolvable(key_headers, texts, key_id, "key")
            key_reader = texts[key_id]
            key = _header_case("key", key_headers,
                               lambda header, writer: _from_avro("key", header, texts[writer], key_reader), "key")
            columns.append(F.when(F.col("key").isNotNull(), key).alias("key"))
        else:
            columns.append(F.lit(None).cast(key_field.dataType).alias("key"))
    try:
        decoded = _select(records, columns, envelope, out_type, _has_unrepresentable(reader))
        produced = decoded.schema
    except Exception as exc:  # spark-avro refuses the schema (a decimal wider than 38 digits, ...)
        raise JvmDecodeUnavailable(f"from_avro cannot read schema {schema_id}: {str(exc).splitlines()[0]}") from exc
    if loose(produced) != loose(out_type):
        differing = [f.name for f in out_type.fields
                     if f.name not in produced.fieldNames() or loose(produced[f.name].dataType) != loose(f.dataType)]
        raise JvmDecodeUnavailable(f"from_avro maps schema {schema_id} to other Spark types than the Python "
                                   f"decoder in {', '.join(differing)}")
    return decoded


def _has_unrepresentable(envelope_text: str) -> bool:
    """True if the envelope schema has the ``unrepresentable`` field (writers before it had not)."""
    return any(f.get("name") == "unrepresentable" for f in json.loads(envelope_text).get("fields", []))


def _select(records: DataFrame, columns: list[Column], envelope: Column, out_type: StructType,
            unrepresentable: bool) -> DataFrame:
    """The envelope's parts as ``schemas.change_type`` lays them out."""
    source = F.struct(*[F.col("_e.source").getField(f.name).alias(f.name) for f in SOURCE_TYPE.fields])
    transaction = F.when(F.col("_e.transaction").isNotNull(), F.struct(
        *[F.col("_e.transaction").getField(f.name).alias(f.name) for f in TRANSACTION_TYPE.fields]))
    return records.select(*columns, envelope.alias("_e")).select(
        *[c for c in ("topic", "partition", "offset", "schema_id", "key") if c in out_type.fieldNames()],
        F.col("_e.op").alias("op"), F.col("_e.before").alias("before"), F.col("_e.after").alias("after"),
        source.alias("source"), transaction.alias("transaction"),
        F.col("_e.unchanged_toast_columns").alias("unchanged_toast_columns"),
        (F.col("_e.unrepresentable") if unrepresentable else F.lit(None).cast(UNREPRESENTABLE_TYPE))
        .alias("unrepresentable"),
        F.col("_e.source.commit_lsn").alias("commit_lsn"),
        F.coalesce(F.col("_e.transaction.total_order"), F.lit(0).cast("long")).alias("total_order"))


def spark_avro_available(spark: SparkSession) -> bool:
    """True if spark-avro (``from_avro``) is on Spark's class path."""
    return loadable(spark, AVRO_FUNCTIONS_CLASS)


def require_spark_avro(spark: SparkSession) -> None:
    """Raise ``MissingSparkAvro``, naming the ``--packages`` coordinates, if spark-avro is missing."""
    if not spark_avro_available(spark):
        raise MissingSparkAvro(missing_packages_message(spark, "spark-avro (the jvm decoder's from_avro)",
                                                        "spark-avro_2.13") + "; or run with --decoder python")
