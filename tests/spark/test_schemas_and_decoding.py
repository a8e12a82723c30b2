"""Pure parts of the Spark package: Avro → Spark types, decoding both framings, evolution,
positions and the consistent cut. No SparkSession (only pyspark.sql.types)."""

from __future__ import annotations

import io
import json
import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, cast

import pytest
from fastavro import parse_schema, schemaless_writer
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pgbridge.encode.wire import confluent_header, fingerprint64, fingerprint_hex, single_object_header
from pgbridge_spark.decode import ChangeDecoder, DecodeError, SchemaCatalog, conformer, schema_id_of
from pgbridge_spark.jvm_decode import MissingSparkAvro, require_spark_avro
from pgbridge_spark.kafka import table_topic_pattern
from pgbridge_spark.progress import (
    METADATA_KEY,
    TableProgress,
    TransactionEnd,
    consistent_cut,
    new_changes_condition,
    past_cut,
)
from pgbridge_spark.schemas import EnvelopeSchema, avro_to_spark
from pgbridge_spark.source import MissingKafkaSource, require_kafka_source

SOURCE = {"type": "record", "name": "Source", "namespace": "pgbridge", "fields": [
    {"name": n, "type": t} for n, t in (("db", "string"), ("schema", "string"), ("table", "string"),
                                        ("lsn", "long"), ("commit_lsn", "long"), ("xid", "long"),
                                        ("ts_us", "long"), ("snapshot", "boolean"))] + [
    {"name": "origin", "type": ["null", "string"], "default": None}]}
TRANSACTION = {"type": "record", "name": "Transaction", "namespace": "pgbridge", "fields": [
    {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
    {"name": "data_collection_order", "type": "long"}]}


def envelope(columns: list[dict[str, Any]]) -> dict[str, Any]:
    row = {"type": "record", "name": "Value", "fields": [{**c, "default": None} for c in columns]}
    return {"type": "record", "name": "Envelope", "namespace": "p.public.t", "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "op", "type": "string"}, {"name": "source", "type": SOURCE},
        {"name": "transaction", "type": ["null", TRANSACTION], "default": None},
        {"name": "unchanged_toast_columns", "type": {"type": "array", "items": "string"}, "default": []}]}


V1 = envelope([{"name": "id", "type": ["null", "int"]},
               {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12,
                                                    "scale": 2}]},
               {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
               {"name": "gone", "type": ["null", "string"]}])
V2 = envelope([{"name": "id", "type": ["null", "long"]},
               {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 14,
                                                    "scale": 3}]},
               {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
               {"name": "added", "type": ["null", {"type": "int", "logicalType": "date"}]}])


def frame(schema: dict[str, Any], datum: dict[str, Any], header: bytes | None = None) -> bytes:
    buffer = io.BytesIO()
    buffer.write(header if header is not None else single_object_header(fingerprint64(schema)))
    schemaless_writer(buffer, parse_schema(json.loads(json.dumps(schema))), datum)
    return buffer.getvalue()


def change(after: dict[str, Any], lsn: int = 100, order: int = 1) -> dict[str, Any]:
    return {"before": None, "after": after, "op": "c", "unchanged_toast_columns": [],
            "source": {"db": "d", "schema": "public", "table": "t", "lsn": lsn, "commit_lsn": lsn, "xid": 7,
                       "ts_us": 1, "snapshot": False, "origin": None},
            "transaction": {"id": f"7:{lsn}", "total_order": order, "data_collection_order": order}}


def test_avro_types_map_to_exact_spark_types() -> None:
    def spark_type(avro: Any) -> Any:
        return avro_to_spark(avro)[0]

    assert spark_type({"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}) == DecimalType(12, 2)
    assert spark_type({"type": "bytes", "logicalType": "decimal", "precision": 60, "scale": 2}) == StringType()
    assert spark_type({"type": "int", "logicalType": "date"}) == DateType()
    assert spark_type({"type": "long", "logicalType": "timestamp-micros"}) == TimestampType()
    assert spark_type({"type": "long", "logicalType": "local-timestamp-micros"}) == TimestampNTZType()
    assert spark_type({"type": "long", "logicalType": "time-micros"}) == LongType()
    assert spark_type({"type": "string", "logicalType": "uuid"}) == StringType()
    assert spark_type({"type": "array", "items": ["null", "int"]}) == ArrayType(IntegerType(), True)
    assert avro_to_spark(["null", "long"]) == (LongType(), True)
    row = EnvelopeSchema.parse(V1).row_type
    assert [f.name for f in row.fields] == ["id", "amount", "at", "gone"]
    assert row["amount"].dataType == DecimalType(12, 2)


def test_older_records_decode_into_the_latest_row_type() -> None:
    texts = {fingerprint_hex(fingerprint64(s)): json.dumps(s) for s in (V1, V2)}
    latest = EnvelopeSchema.parse(V2).row_type
    decoder = ChangeDecoder(texts, latest, None)
    old = frame(V1, change({"id": 1, "amount": Decimal("10.50"), "at": 1_700_000_000_000_000, "gone": "x"}))
    new = frame(V2, change({"id": 2, "amount": Decimal("1.125"), "at": None, "added": 19000}, lsn=200))
    first, second = decoder.decode("p.public.t", 0, 0, None, old), decoder.decode("p.public.t", 0, 1, None, new)
    # int → long, decimal(12,2) → decimal(14,3) exactly, dropped column gone, added column null
    assert first["after"] == {"id": 1, "amount": Decimal("10.500"), "at": 1_700_000_000_000_000, "added": None}
    assert second["after"] == {"id": 2, "amount": Decimal("1.125"), "at": None, "added": 19000}
    assert (first["commit_lsn"], first["total_order"], second["commit_lsn"]) == (100, 1, 200)
    assert first["schema_id"] != second["schema_id"]


def test_values_without_an_exact_form_in_the_target_type_become_null() -> None:
    narrow = conformer({"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}, DecimalType(12, 2))
    assert narrow((1234).to_bytes(2, "big", signed=True)) is None
    assert narrow((1230).to_bytes(2, "big", signed=True)) == Decimal("1.23")
    assert conformer("long", StringType())(5) == "5"
    assert conformer("string", IntegerType())("x") is None


def test_confluent_framing_is_decoded_with_schemas_from_the_registry() -> None:
    served: list[str] = []

    class Registry(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.append(self.path)
            body = json.dumps({"schema": json.dumps(V1)}).encode()
            self.send_response(200 if self.path == "/schemas/ids/42" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        catalog = SchemaCatalog(registry_url=f"http://127.0.0.1:{server.server_port}")
        data = frame(V1, change({"id": 3, "amount": None, "at": None, "gone": None}), confluent_header(42))
        schema_id, _ = schema_id_of(data)
        texts = catalog.texts({schema_id})
        catalog.texts({schema_id})  # cached: one request
        row = ChangeDecoder(texts, EnvelopeSchema.parse(V1).row_type, None).decode("t", 0, 0, None, data)
    finally:
        server.shutdown()
        server.server_close()
    assert schema_id == "42" and served == ["/schemas/ids/42"]
    assert row["after"]["id"] == 3 and row["op"] == "c"


def test_unknown_framing_and_schemas_are_errors() -> None:
    with pytest.raises(DecodeError, match="neither"):
        schema_id_of(b"plain text")
    with pytest.raises(DecodeError, match="not found"):
        SchemaCatalog(load_schemas=dict).texts({"0123456789abcdef"})
    with pytest.raises(DecodeError, match="no schema registry"):
        SchemaCatalog().texts({"42"})


def test_duplicates_are_positions_at_or_below_the_partition_high_water_mark() -> None:
    progress = TableProgress()
    assert new_changes_condition(progress) == "true"
    progress.advance({0: (100, 3)}, None)
    progress.advance({0: (90, 1), 1: (50, 2)}, (80, 1))
    assert progress.partitions == {"0": (100, 3), "1": (50, 2)} and progress.truncated_at == (80, 1)
    assert TableProgress.from_metadata(progress.to_metadata()) == progress
    condition = new_changes_condition(progress)
    assert "(partition = 0 AND ((commit_lsn > 100 OR (commit_lsn = 100 AND total_order > 3))" in condition
    assert "partition NOT IN (0, 1)" in condition and "total_order >= 1" in condition


def test_the_cut_stops_at_the_first_transaction_with_unread_events() -> None:
    ends = [TransactionEnd(10, {"public.a": 2, "public.b": 1}), TransactionEnd(20, {"public.a": 1}),
            TransactionEnd(30, {"public.b": 2}), TransactionEnd(40, {"public.other": 5})]
    counts = {(10, "public.a"): 2, (10, "public.b"): 1, (20, "public.a"): 1, (30, "public.b"): 1}
    assert consistent_cut(0, ends, counts, None) == 20
    assert consistent_cut(0, ends, {**counts, (30, "public.b"): 2}, {"public.a", "public.b"}) == 40
    assert consistent_cut(25, ends[:2], counts, None) == 25  # nothing new beyond the old cut
    # what waits for a later batch: the events and ends of the transactions past the cut
    assert past_cut(20, counts, [end.commit_lsn for end in ends]) == 1 + 2
    assert past_cut(40, counts, [end.commit_lsn for end in ends]) == 0


def test_the_pending_tables_progress_records_what_it_holds() -> None:
    progress = TableProgress(app="job", batch=7, cut=40, pending=3)
    assert TableProgress.from_metadata(progress.to_metadata()) == progress
    older = json.loads(progress.to_metadata())
    del older[METADATA_KEY]["pending"]  # written by a job before the field: unknown, so read
    assert TableProgress.from_metadata(json.dumps(older)).pending is None


def test_table_topics_exclude_pgbridges_own_topics() -> None:
    import re
    pattern = re.compile(table_topic_pattern("pg.x"))
    assert pattern.fullmatch("pg.x.public.orders")
    for own in ("pg.x._schemas", "pg.x.messages", "pg.x.transactions", "pg.x._snapshot", "pg.xy.public.t"):
        assert not pattern.fullmatch(own)


def test_key_struct_types_follow_the_key_schema() -> None:
    key = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}
    texts = {fingerprint_hex(fingerprint64(s)): json.dumps(s) for s in (V1, key)}
    decoder = ChangeDecoder(texts, EnvelopeSchema.parse(V1).row_type,
                            StructType([StructField("id", LongType(), False)]))
    value = frame(V1, change({"id": 1, "amount": None, "at": None, "gone": None}))
    row = decoder.decode("t", 0, 0, frame(key, {"id": 1}), value)
    assert row["key"] == {"id": 1}


def test_a_session_without_the_connectors_is_told_which_packages_to_add() -> None:
    class WithoutJvm:  # as Spark Connect: no JVM gateway, so no class of spark-sql-kafka or spark-avro
        _jvm = None
        version = "4.3.0"

    session = cast(SparkSession, WithoutJvm())
    with pytest.raises(MissingKafkaSource, match=r"--packages org\.apache\.spark:spark-sql-kafka-0-10_2\.13:4\.1\.3"):
        require_kafka_source(session)
    with pytest.raises(MissingSparkAvro, match=r"spark-avro_2\.13:4\.1\.1.*--decoder python"):
        require_spark_avro(session)
