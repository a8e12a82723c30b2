"""The two decoders give the same rows: spark-avro's ``from_avro`` (``jvm``) and fastavro (``python``).

The same framed records — every column type the Spark end-to-end tests use, logical types,
arrays and a nested record, nulls and edge values, both framings, a key, two writer schemas of
one table — go through ``jvm_change_frame`` and ``python_change_frame``; types (up to nullability,
which the JVM cannot prove) and values must be equal. Where ``from_avro`` would not be exact the
JVM decoder must refuse (``JvmDecodeUnavailable``), so the mirror uses the Python decoder there.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid
from decimal import Decimal
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from pyspark.sql import DataFrame, SparkSession

from pgbridge.encode.wire import confluent_header, fingerprint64, fingerprint_hex, single_object_header
from pgbridge_spark.decode import python_change_frame, schema_id_of
from pgbridge_spark.jvm_decode import (
    JvmDecodeUnavailable,
    jvm_change_frame,
    loose,
    resolution_problem,
    spark_avro_available,
)
from pgbridge_spark.schemas import EnvelopeSchema, change_type, record_to_struct, resolve_named
from pgbridge_spark.source import kafka_provider_available

pytestmark = [pytest.mark.spark]

SOURCE = {"type": "record", "name": "Source", "namespace": "pgbridge", "fields": [
    {"name": n, "type": t} for n, t in (("db", "string"), ("schema", "string"), ("table", "string"),
                                        ("lsn", "long"), ("commit_lsn", "long"), ("xid", "long"),
                                        ("ts_us", "long"), ("snapshot", "boolean"))] + [
    {"name": "origin", "type": ["null", "string"], "default": None}]}
TRANSACTION = {"type": "record", "name": "Transaction", "namespace": "pgbridge", "fields": [
    {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
    {"name": "data_collection_order", "type": "long"}]}


def nullable(avro: Any) -> list[Any]:
    return ["null", avro]


def envelope(columns: list[tuple[str, Any]]) -> dict[str, Any]:
    row = {"type": "record", "name": "Value",
           "fields": [{"name": n, "type": nullable(t), "default": None, "pg_type": "x"} for n, t in columns]}
    return {"type": "record", "name": "Envelope", "namespace": "p.public.t", "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "op", "type": "string"}, {"name": "source", "type": SOURCE},
        {"name": "transaction", "type": ["null", TRANSACTION], "default": None},
        {"name": "unchanged_toast_columns", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "unrepresentable", "type": ["null", {"type": "map", "values": "string"}], "default": None}]}


POINT = {"type": "record", "name": "point_t", "namespace": "pg.public",
         "fields": [{"name": "x", "type": ["null", "double"], "default": None},
                    {"name": "label", "type": ["null", "string"], "default": None}]}
EVERY_TYPE = [
    ("i2", "int"), ("i8", "long"), ("f4", "float"), ("f8", "double"), ("flag", "boolean"), ("txt", "string"),
    ("raw", "bytes"),
    ("amount", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}),
    ("whole", {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 0}),
    ("day", {"type": "int", "logicalType": "date"}),
    ("at", {"type": "long", "logicalType": "timestamp-micros"}),
    ("at_ms", {"type": "long", "logicalType": "timestamp-millis"}),
    ("local", {"type": "long", "logicalType": "local-timestamp-micros"}),
    ("clock", {"type": "long", "logicalType": "time-micros"}),
    ("id", {"type": "string", "logicalType": "uuid"}),
    ("doc", "string"),  # json / jsonb: text
    ("ints", {"type": "array", "items": ["null", "int"]}),
    ("words", {"type": "array", "items": ["null", "string"]}),
    ("amounts", {"type": "array", "items": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 8,
                                                     "scale": 3}]}),
    ("point", POINT),
    ("points", {"type": "array", "items": ["null", "pg.public.point_t"]}),
]
EVERY_TYPE_SCHEMA = envelope(EVERY_TYPE)
KEY = {"type": "record", "name": "Key", "namespace": "p.public.t", "fields": [{"name": "i8", "type": "long"}]}

MICROS = 1_000_000
ROWS: list[dict[str, Any]] = [
    {"i2": -32768, "i8": 2**63 - 1, "f4": 1.5, "f8": -2.25e300, "flag": True, "txt": "héllo ✓", "raw": b"\x00\xff",
     "amount": Decimal("-1234567890.12"), "whole": Decimal("9" * 38), "day": -719162,
     "at": (-62135596800 + 86400) * MICROS, "at_ms": 1_700_000_000_123, "local": 253402300799 * MICROS + 999_999,
     "clock": 86_399_999_999, "id": str(uuid.UUID(int=1)), "doc": '{"k": [1, 2]}', "ints": [1, None, -3],
     "words": ["a", None, ""], "amounts": [Decimal("1.250"), None, Decimal("-0.001")],
     "point": {"x": 1.0, "label": None}, "points": [{"x": None, "label": "p"}, None]},
    {name: None for name, _ in EVERY_TYPE},
    {"i2": 0, "i8": -1, "f4": float("inf"), "f8": float("nan"), "flag": False, "txt": "", "raw": b"",
     "amount": Decimal("0.00"), "whole": Decimal(-1), "day": 0, "at": 0, "at_ms": -1, "local": -1, "clock": 0,
     "id": str(uuid.UUID(int=2**128 - 1)), "doc": "[]", "ints": [], "words": [], "amounts": [],
     "point": {"x": None, "label": None}, "points": []},
]


def framed(schema: dict[str, Any], datum: dict[str, Any], header: bytes) -> bytes:
    buffer = io.BytesIO(header)
    buffer.seek(len(header))
    schemaless_writer(buffer, parse_schema(json.loads(json.dumps(schema))), datum)
    return buffer.getvalue()


def change(after: dict[str, Any] | None, before: dict[str, Any] | None = None, op: str = "c", lsn: int = 100,
           order: int | None = 1) -> dict[str, Any]:
    return {"before": before, "after": after, "op": op, "unchanged_toast_columns": [] if op != "u" else ["txt"],
            "unrepresentable": None,
            "source": {"db": "d", "schema": "public", "table": "t", "lsn": lsn, "commit_lsn": lsn, "xid": 7,
                       "ts_us": 1, "snapshot": order is None, "origin": None},
            "transaction": None if order is None else {"id": f"7:{lsn}", "total_order": order,
                                                       "data_collection_order": order}}


def single_object(schema: dict[str, Any]) -> bytes:
    return single_object_header(fingerprint64(schema))


def both_decoders(spark: SparkSession, records: list[tuple[bytes | None, bytes]], texts: dict[str, str],
                  latest: dict[str, Any], key: dict[str, Any] | None) -> tuple[DataFrame, DataFrame]:
    rows = [("p.public.t", 0, offset, k, v) for offset, (k, v) in enumerate(records)]
    frame = spark.createDataFrame(rows, "topic string, partition int, offset long, key binary, value binary")
    schema_id = next(i for i, t in texts.items() if json.loads(t) == latest)
    key_id = next((i for i, t in texts.items() if key is not None and json.loads(t) == key), None)
    row_type = EnvelopeSchema.parse(latest).row_type
    key_type = record_to_struct(resolve_named(key)) if key is not None else None
    out_type = change_type(row_type, key_type)
    value_headers = {v[:schema_id_of(v)[1]]: schema_id_of(v)[0] for _, v in records}
    key_headers = {k[:schema_id_of(k)[1]]: schema_id_of(k)[0] for k, _ in records if k is not None}
    jvm = jvm_change_frame(frame, texts=texts, value_headers=value_headers, schema_id=schema_id,
                           key_headers=key_headers, key_id=key_id, out_type=out_type)
    python = python_change_frame(frame, texts=texts, row_type=row_type, key_type=key_type, out_type=out_type,
                                 timezone="UTC")
    return jvm, python


def rows_of(frame: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in frame.orderBy("offset").collect()]


def same(a: Any, b: Any) -> bool:
    """Equality that counts NaN equal to NaN (the rows carry one)."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(type(a) is type(b) and a == b)


def test_the_session_has_sparks_kafka_source_and_spark_avro(spark: SparkSession) -> None:
    assert kafka_provider_available(spark) and spark_avro_available(spark)


def test_every_column_type_decodes_to_the_same_rows_in_both_decoders(spark: SparkSession) -> None:
    # given: single-object records of every type (insert, update with before, delete, snapshot read)
    header = single_object(EVERY_TYPE_SCHEMA)
    key_header = confluent_header(7)
    values = [framed(EVERY_TYPE_SCHEMA, change(ROWS[0]), header),
              framed(EVERY_TYPE_SCHEMA, change(ROWS[1], before=ROWS[0], op="u", lsn=200, order=3), header),
              framed(EVERY_TYPE_SCHEMA, change(None, before=ROWS[2], op="d", lsn=300), header),
              framed(EVERY_TYPE_SCHEMA, change(ROWS[2], op="r", lsn=50, order=None), header)]
    keys = [framed(KEY, {"i8": i}, key_header) for i in (1, 2)] + [None, framed(KEY, {"i8": -5}, key_header)]
    texts = {fingerprint_hex(fingerprint64(EVERY_TYPE_SCHEMA)): json.dumps(EVERY_TYPE_SCHEMA), "7": json.dumps(KEY)}
    # when
    jvm, python = both_decoders(spark, list(zip(keys, values, strict=True)), texts, EVERY_TYPE_SCHEMA, KEY)
    # then: the same Spark types (nullability aside) and the same values, field for field
    assert loose(jvm.schema) == loose(python.schema)
    jvm_rows, python_rows = rows_of(jvm), rows_of(python)
    assert len(jvm_rows) == len(python_rows) == 4
    for j, p in zip(jvm_rows, python_rows, strict=True):
        differing = [k for k in p if not same(j[k], p[k])]
        assert not differing, {k: (j[k], p[k]) for k in differing}
    assert python_rows[0]["after"]["at"] == dt.datetime(1, 1, 2)  # session time zone UTC, naive
    assert python_rows[0]["after"]["whole"] == Decimal("9" * 38)
    assert python_rows[3]["total_order"] == 0 and python_rows[3]["transaction"] is None
    assert python_rows[2]["key"] is None


def test_older_writers_resolve_into_the_latest_schema_in_both_decoders(spark: SparkSession) -> None:
    # given: v1 → v2 adds a column, drops one and widens int → long and float → double
    v1 = envelope([("id", "int"), ("ratio", "float"), ("gone", "string"),
                   ("at", {"type": "long", "logicalType": "timestamp-micros"})])
    v2 = envelope([("id", "long"), ("ratio", "double"), ("at", {"type": "long", "logicalType": "timestamp-micros"}),
                   ("added", {"type": "int", "logicalType": "date"})])
    texts = {fingerprint_hex(fingerprint64(s)): json.dumps(s) for s in (v1, v2)}
    records: list[tuple[bytes | None, bytes]] = [
        (None, framed(v1, change({"id": 1, "ratio": 0.1, "gone": "x", "at": 5}), single_object(v1))),
        (None, framed(v2, change({"id": 2**40, "ratio": 0.1, "at": None, "added": 19000}, lsn=200),
                      single_object(v2))),
        (None, framed(v1, change(None, before={"id": 3, "ratio": None, "gone": None, "at": None}, op="d", lsn=300),
                      single_object(v1)))]
    # when
    jvm, python = both_decoders(spark, records, texts, v2, None)
    # then
    jvm_rows, python_rows = rows_of(jvm), rows_of(python)
    assert jvm_rows == python_rows
    assert python_rows[0]["after"] == {"id": 1, "ratio": pytest.approx(0.1), "at": dt.datetime(1970, 1, 1, 0, 0, 0, 5),
                                       "added": None}
    assert python_rows[0]["schema_id"] != python_rows[1]["schema_id"]


def test_changes_from_avro_would_not_read_exactly_are_left_to_the_python_decoder(spark: SparkSession) -> None:
    money = {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}
    wider = {"type": "bytes", "logicalType": "decimal", "precision": 14, "scale": 3}
    # a retyped decimal is bytes → bytes to Avro: the old digits would be read with the new scale
    assert resolution_problem(nullable(money), nullable(wider)) is not None
    assert resolution_problem("long", "float") is not None  # an Avro promotion, but not exact
    assert resolution_problem("int", "string") is not None
    assert resolution_problem(nullable("int"), nullable("long")) is None
    v1, v2 = envelope([("amount", money)]), envelope([("amount", wider)])
    # (registry ids: single-object fingerprints ignore logical types, so v1 and v2 would share one)
    texts = {"1": json.dumps(v1), "2": json.dumps(v2)}
    records: list[tuple[bytes | None, bytes]] = [
        (None, framed(v1, change({"amount": Decimal("10.50")}), confluent_header(1))),
        (None, framed(v2, change({"amount": Decimal("1.125")}), confluent_header(2)))]
    with pytest.raises(JvmDecodeUnavailable, match=r"amount: .*\"scale\": 2.*\"scale\": 3"):
        both_decoders(spark, records, texts, v2, None)
    # a decimal wider than Spark's 38 digits: spark-avro has no type for it, Python keeps the text
    huge = envelope([("n", {"type": "bytes", "logicalType": "decimal", "precision": 60, "scale": 5})])
    texts = {fingerprint_hex(fingerprint64(huge)): json.dumps(huge)}
    with pytest.raises(JvmDecodeUnavailable, match="from_avro"):
        both_decoders(spark, [(None, framed(huge, change({"n": Decimal("1.5")}), single_object(huge)))],
                      texts, huge, None)
